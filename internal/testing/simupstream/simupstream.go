// Package simupstream serves the simulated upstream (upstreamsim) on
// loopback listeners, one per network, for the tests and the load tool,
// and points a configuration at it. It imports no gateway package, so that
// the process harness (internal/testing/fleet), which the real-time tests
// use, and the in-process replica set (internal/testing/replicaset) share
// it without a cycle.
package simupstream

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"streamgate/config"
	"streamgate/upstreamsim"
)

// Upstream is the simulator serving its networks on loopback listeners,
// one per network.
type Upstream struct {
	Sim *upstreamsim.Simulator
	// URL is the base URL (http://host:port) of each gateway network's
	// upstream, by the gateway's network name.
	URL map[string]string

	servers []*http.Server
	ownSim  bool
}

// UpstreamConfig is the simulator to start and what it serves.
type UpstreamConfig struct {
	// Sim, if not nil, is the simulator to serve (SimConfig is then
	// ignored); Close leaves it running: a test's replicas may share it.
	Sim *upstreamsim.Simulator
	// SimConfig changes the configuration of a new simulator:
	// upstreamsim.Default() with its rate limit off (RateLimit 0).
	SimConfig func(*upstreamsim.Config)
	// Networks are the gateway networks served (names of config.Default's
	// networks); nil: all of them.
	Networks []string
	// Wrap wraps the simulator's handler of a network (the gateway's name
	// of it), to record or alter what the upstream receives and answers.
	Wrap func(network string, h http.Handler) http.Handler
}

// StartUpstream starts the simulator of c and its listeners.
func StartUpstream(c UpstreamConfig) (_ *Upstream, err error) {
	u := &Upstream{Sim: c.Sim, URL: map[string]string{}}
	defer func() {
		if err != nil {
			u.Close()
		}
	}()
	if u.Sim == nil {
		simCfg := upstreamsim.Default()
		simCfg.RateLimit = 0
		if c.SimConfig != nil {
			c.SimConfig(&simCfg)
		}
		if u.Sim, err = upstreamsim.New(simCfg); err != nil {
			return nil, fmt.Errorf("replicaset: simulator: %w", err)
		}
		u.ownSim = true
	}
	networks := c.Networks
	if networks == nil {
		networks = config.Default().NetworkNames()
	}
	for _, name := range networks {
		h := u.Sim.Handler(upstreamsim.NetworkFor(name))
		if c.Wrap != nil {
			h = c.Wrap(name, h)
		}
		if u.URL[name], err = u.listen(h); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// listen serves h on a free loopback port and returns its base URL.
func (u *Upstream) listen(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("replicaset: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	u.servers = append(u.servers, srv)
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), nil
}

// Close stops the listeners at once (open connections too) and the
// simulator if Upstream started it.
func (u *Upstream) Close() {
	for _, srv := range u.servers {
		srv.Close()
	}
	if u.ownSim && u.Sim != nil {
		u.Sim.Close()
	}
}

// Configure points cfg's networks at u, each listening on a free loopback
// port with the organisation's key of the simulator, and its WebSocket
// too (upstream.ws_url) when ws is true; it drops the networks u does not
// serve (from the teams too). The admin listener is turned off.
func (u *Upstream) Configure(cfg *config.Config, ws bool) {
	cfg.Server.AdminListen = ""
	for name, n := range cfg.Networks {
		url, ok := u.URL[name]
		if !ok {
			delete(cfg.Networks, name)
			continue
		}
		n.Listen = "127.0.0.1:0"
		up := &n.Upstream
		up.URL = url
		if ws {
			up.WSURL = "ws" + strings.TrimPrefix(url, "http")
		}
		up.APIKey = upstreamsim.OrgKeyID
		up.APISecret = config.Secret(upstreamsim.OrgKeySecret)
	}
	for i := range cfg.Teams {
		cfg.Teams[i].Networks = slices.DeleteFunc(cfg.Teams[i].Networks, func(n string) bool { return u.URL[n] == "" })
	}
	cfg.Teams = slices.DeleteFunc(cfg.Teams, func(t config.Team) bool { return len(t.Networks) == 0 })
}

// ShareRedis makes cfg keep its limits and its cache tier in the Redis of
// rt, as replicas that share them do.
func ShareRedis(cfg *config.Config, rt config.RedisTarget) {
	cfg.Cache.Shared.Backend = config.SharedRedis
	cfg.Cache.Shared.URL, cfg.Cache.Shared.Sentinel, cfg.Cache.Shared.Cluster = rt.URL, rt.Sentinel, rt.Cluster
	cfg.RateLimit.Backend = config.BackendRedis
	cfg.RateLimit.Redis.URL, cfg.RateLimit.Redis.Sentinel, cfg.RateLimit.Redis.Cluster = rt.URL, rt.Sentinel, rt.Cluster
}
