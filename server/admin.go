package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"streamgate/status"
)

// adminHandler serves /metrics, /healthz (the process is alive), /readyz
// (every upstream has answered, and the server is not draining), the status
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
		switch {
		case s.draining.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"draining"}`+"\n")
		case !s.gw.Ready():
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"waiting for every upstream to answer"}`+"\n")
		default:
			// Redis is shared by every replica: taking this one out of
			// the balancer would not help, so it stays ready, degraded,
			// as the fail mode prescribes.
			if d := s.redisDegraded(); len(d) > 0 {
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
