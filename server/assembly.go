// This file holds the assembly: every part New builds (build.go), the
// accessors the tools and tests look inside with, and release, which frees
// the parts.

package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/certs"
	"streamgate/config"
	"streamgate/don"
	"streamgate/proxy"
	"streamgate/realtime"
	"streamgate/redisconn"
	"streamgate/status"
	"streamgate/tracing"
	"streamgate/usage"
	"streamgate/wsgate"
)

// assembly is the parts of a gateway, as New's steps build them (build.go);
// the Server runs them. Once New returns, only Shutdown changes it (hubs).
type assembly struct {
	log      *zap.Logger
	reg      *prometheus.Registry
	version  string
	emb      embedded          // the embedded upstream, or nil
	store    *cache.Store      // the memory cache
	shared   *shared.Tier      // nil: off
	sharedRC *redisconn.Client // the shared tier's client, nil when off
	limits   *Limits
	ownLimit bool                 // the limits are released with the rest (not Options.Limits)
	gates    map[string]*don.Gate // report verification per network
	traces   *tracing.Provider    // nil: tracing off
	streams  *wsgate.Gate         // the WebSocket endpoint
	gw       *proxy.Gateway
	hubs     map[string]*realtime.Hub
	status   *status.Sampler
	usage    *usage.Ledger // the usage ledger (usage.go)
	arch     *archiveRun   // the archive (archive.go); nil: off

	upstreams []*served // the embedded upstream's listeners
	networks  []*served // the gateway's listeners
	admin     *served   // nil when disabled
	addrs     map[string]string

	certMetrics *certs.Metrics // registered with the first TLS listener
	errorLogs   []*errorLog    // the listeners' http.Server.ErrorLog
}

// served is a bound listener and the server that will serve it.
type served struct {
	ln  net.Listener
	srv *http.Server

	tls      *certs.Source                    // nil: plain HTTP
	tlsBlock func(*config.Config) *config.TLS // where a configuration gives its files
}

// newAssembly is an assembly with nothing built yet: opts' logger and
// registry, or none and a new one.
func newAssembly(opts Options) *assembly {
	a := &assembly{log: opts.Logger, reg: opts.Registry, addrs: map[string]string{}, version: opts.Version}
	if a.log == nil {
		a.log = zap.NewNop()
	}
	if a.reg == nil {
		a.reg = prometheus.NewRegistry()
	}
	if a.version == "" {
		a.version = "dev"
	}
	return a
}

// Addr returns the address a network ("mainnet", …) or the admin listener
// ("admin") is bound to, or "".
func (a *assembly) Addr(name string) string { return a.addrs[name] }

// Gateway, Cache and Registry give access to the parts, for the tools and
// tests that look inside (and Simulator, in builds that carry it).
func (a *assembly) Gateway() *proxy.Gateway        { return a.gw }
func (a *assembly) Cache() *cache.Store            { return a.store }
func (a *assembly) Registry() *prometheus.Registry { return a.reg }

// Hub returns the real-time hub of network, or nil.
func (a *assembly) Hub(network string) *realtime.Hub { return a.hubs[network] }

// Gate returns the report verification of a network, or nil.
func (a *assembly) Gate(network string) *don.Gate { return a.gates[network] }

// Status is the status page's sampler.
func (a *assembly) Status() *status.Sampler { return a.status }

// refusing says why the replica refuses every request now, "" when it
// does not: ratelimit.redis.fail_mode closed, while the limits' Redis
// cannot be used.
func (a *assembly) refusing() string {
	if a.limits == nil {
		return ""
	}
	if h := a.limits.Refusing(); h != "" {
		return h + "; ratelimit.redis.fail_mode closed refuses every request"
	}
	return ""
}

// release frees what New built. Listeners never served are closed.
func (a *assembly) release() {
	if a.status != nil {
		a.status.Stop()
	}
	a.streams.Close()
	if a.gw != nil {
		a.gw.Close()
	}
	a.closeTLS()
	for _, group := range [][]*served{a.networks, a.upstreams, {a.admin}} {
		for _, sv := range group {
			if sv != nil {
				sv.ln.Close()
			}
		}
	}
	for _, el := range a.errorLogs {
		el.Close() // the counts of lines not written yet
	}
	for _, h := range a.hubs {
		h.Close()
	}
	a.arch.close() // after the hubs, which write to it; what is queued is written
	a.closeUsage() // before the limits' Redis closes
	if a.store != nil {
		a.store.Close()
	}
	if a.sharedRC != nil {
		a.sharedRC.Close()
	}
	if a.limits != nil && a.ownLimit {
		a.limits.Close()
	}
	if a.emb != nil {
		a.emb.close()
	}
	if a.traces != nil {
		// What is pending is exported, within a bound: a collector that
		// does not answer does not hold the exit.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := a.traces.Shutdown(ctx); err != nil {
			a.log.Warn("tracing: spans not exported at shutdown", zap.Error(err))
		}
	}
}
