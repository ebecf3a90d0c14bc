package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"streamgate/status"
)

// readyProbeTimeout bounds /readyz's probe of the limits' Redis (a dial
// and a PING; the client's own deadline is shorter).
const readyProbeTimeout = 2 * time.Second

// adminHandler serves /metrics, /healthz (the process is alive), /readyz
// (every upstream has answered, the server is not draining, and it does
// not refuse every request for want of Redis), the status
// page at / and its facts at /status.json, and, when server.pprof is on,
// the runtime's profiles under /debug/pprof/ (behind the admin token when
// one is set).
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	if cfg := s.cfg.Load().Server; cfg.Pprof { // read at start, as the token is
		mux.Handle("/debug/pprof/", status.RequireToken(cfg.AdminToken.Reveal(), pprofHandler()))
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg, EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if s.limits != nil && s.limits.Refusing() != "" {
			// No request comes to a replica that is not ready: this
			// probe is what finds Redis back.
			ctx, cancel := context.WithTimeout(r.Context(), readyProbeTimeout)
			s.limits.Probe(ctx)
			cancel()
		}
		switch {
		case s.draining.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"draining"}`+"\n")
		case !s.gw.Ready():
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"waiting for every upstream to answer"}`+"\n")
		case s.refusing() != "":
			// fail_mode closed refuses every request while Redis cannot
			// be used: a balancer should send them to a replica that can
			// serve them. When every replica lost Redis, none is ready,
			// and each would have refused anyway (ARCHITECTURE.md §5).
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "refusing: " + s.refusing()})
		default:
			// With fail_mode open the limits decide without Redis: the
			// replica serves, degraded, and stays ready.
			if d := append(s.redisDegraded(), s.arch.degraded()...); len(d) > 0 {
				_ = json.NewEncoder(w).Encode(map[string]string{"status": "degraded: " + strings.Join(d, "; ")})
				return
			}
			io.WriteString(w, `{"status":"ready"}`+"\n")
		}
	})
	// The status page and its JSON: the sampler's latest snapshot.
	st := status.Handler(s.status, s.cfg.Load().Server.AdminToken.Reveal())
	mux.Handle("GET /{$}", st)
	mux.Handle("GET /status.json", st)
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	return mux
}

// pprofHandler serves net/http/pprof's handlers on a mux of its own (the
// package also registers them on http.DefaultServeMux, which no listener
// of the gateway serves). The command line is left out: it is no profile.
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
