// This file holds the admin listener's endpoints and what they report of
// the running gateway: readiness, Redis's health, the status page's facts.

package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"streamgate/ratelimit"
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
	mux.Handle("GET /usage.json", status.RequireToken(s.cfg.Load().Server.AdminToken.Reveal(), http.HandlerFunc(s.serveUsage)))
	mux.Handle("/archive/", status.RequireToken(s.cfg.Load().Server.AdminToken.Reveal(), s.arch.adminHandler()))
	chart := status.RequireToken(s.cfg.Load().Server.AdminToken.Reveal(), s.chartHandler()) // chart.go
	mux.Handle("GET /chart", chart)
	mux.Handle("GET /chart/", chart)
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

// redisDegraded says, for each Redis client that cannot use Redis now,
// why and what follows; nil while all can.
func (s *Server) redisDegraded() []string {
	var out []string
	if s.limits != nil {
		if h := s.limits.RedisHealth(); h != "" {
			mode := s.cfg.Load().RateLimit.Redis.FailMode
			out = append(out, fmt.Sprintf("%s; the limits and the replay record follow ratelimit.redis.fail_mode (%s)", h, mode))
		}
	}
	if s.sharedRC != nil {
		if h := s.sharedRC.Health(); h != "" {
			out = append(out, h+"; each replica caches alone")
		}
	}
	return out
}

// statusFacts are what the status page shows besides the metrics: the
// configuration in force (teams by name, never their keys) and the hubs.
func (s *Server) statusFacts() status.Facts {
	cfg := s.cfg.Load()
	f := status.Facts{Version: s.version, LoadedAt: *s.loadedAt.Load(), LastReload: s.reloaded.Load(), MaxBytes: int64(cfg.Cache.MaxBytes)}
	f.Redis = s.redisDegraded()
	f.Archive = s.arch.degraded()
	f.ArchiveState = s.arch.state()
	f.ArchiveStreams = archiveStreams(s.arch, s.cfg.Load(), s.gw)
	today := usageToday(s.usage)
	for _, name := range cfg.NetworkNames() {
		// A network, then each of its other stream partitions (sharing:
		// credential), by label: its hub's figures are its own.
		for i, p := range cfg.Partitions(name) {
			n := status.NetworkInfo{Name: p.Label(name), BudgetRPS: cfg.Networks[name].Upstream.Budget.RPS}
			h := s.hubs[n.Name]
			if h != nil {
				n.Hub = h.Stats
			}
			if i == 0 || h != nil {
				f.Networks = append(f.Networks, n)
			}
		}
	}
	for _, t := range cfg.Teams {
		ti := status.TeamInfo{Name: t.Name, DailyQuota: t.DailyQuota}
		if t.DailyQuota > 0 && s.limits.Quota != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if n, err := s.limits.Quota.Used(ctx, ratelimit.DailyKey(t.Name), time.Now()); err == nil {
				ti.DailyUsed = &n
			}
			cancel()
		}
		if row, ok := today[t.Name]; ok || today != nil {
			ti.Today = &status.UsageToday{Requests: row.Requests, Reports: row.Reports, Frames: row.Frames,
				UpstreamCalls: row.UpstreamCalls, Bytes: row.Bytes}
		}
		f.Teams = append(f.Teams, ti)
	}
	return f
}
