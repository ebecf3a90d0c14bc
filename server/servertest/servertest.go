// Package servertest runs a whole gateway in-process for tests and
// benchmarks, or several replicas of one (StartReplicas), built by
// server.New exactly as the binary builds it: the simulator as its
// upstream (on loopback listeners, wrapped as Options.Upstream says, so
// that a test can record or alter what the upstream sees) and the
// gateway's networks on free loopback ports, configured like the demo.
// The gateways are internal/testing/replicaset's, tied here to a
// testing.T.
package servertest

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/config"
	"streamgate/internal/testing/replicaset"
	"streamgate/proxy"
	"streamgate/server"
	"streamgate/upstreamsim"
)

// Options adjust an Env before it starts. Every field may be nil.
type Options struct {
	// Sim changes the simulator's configuration (upstreamsim.Default() with
	// its rate limit off).
	Sim func(*upstreamsim.Config)
	// Simulator, if non-nil, is the upstream instead of a new one (Sim is
	// then ignored): gateways a test starts one by one share it. The Env
	// does not close it. (StartReplicas starts several on one simulator.)
	Simulator *upstreamsim.Simulator
	// Config changes the gateway's configuration (config.Default() with
	// upstreams pointed at the simulator, its DON trusted in mode enforce,
	// and the demo team unlimited).
	Config func(*config.Config)
	// Logger receives the gateway's logs (and access log) instead of t.Log.
	Logger *zap.Logger
	// Limits replace the limits the configuration describes.
	Limits *server.Limits
	// Upstream wraps the simulator's handler of a network, to record or
	// alter what the upstream receives and answers.
	Upstream func(network string, h http.Handler) http.Handler
	// Now is the clock of the gateway and its cache (not of the
	// simulator). Sign requests with the same clock (Client.Now).
	Now func() time.Time
	// Quiet drops the gateway's logs instead of sending them to t.Log.
	Quiet bool
	// Cold returns at once after start. By default Start waits (up to 5 s)
	// for the catalog warm-up the server makes at start, then resets the
	// simulator's counters, so that a test counts its own upstream calls.
	Cold bool
}

// Env is a running gateway and its simulated upstream.
type Env struct {
	Sim      *upstreamsim.Simulator
	Server   *server.Server
	Gateway  *proxy.Gateway
	Config   *config.Config
	Cache    *cache.Store
	Registry *prometheus.Registry

	// Base URLs of the gateway's networks (https:// for a network with a
	// tls block) and of the simulator's.
	Mainnet, Testnet     string
	UpMainnet, UpTestnet string
}

// Start starts an Env and stops it when t ends.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	env, err := TryStart(t, opts)
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	return env
}

// TryStart is Start returning the gateway's failure to start (such as a
// listen address in use: syscall.EADDRINUSE) rather than failing t.
func TryStart(t testing.TB, opts Options) (*Env, error) {
	t.Helper()
	envs, err := start(t, 1, opts)
	if err != nil {
		return nil, err
	}
	return envs[0], nil
}

// StartReplicas starts n gateways of one configuration in front of one
// simulator (opts.Simulator, or one of opts.Sim that they share), and
// stops them when t ends: replicas, which share what the configuration
// puts in Redis.
func StartReplicas(t testing.TB, n int, opts Options) []*Env {
	t.Helper()
	envs, err := start(t, n, opts)
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	return envs
}

// start starts n gateways of opts as a replica set (internal/testing/replicaset).
func start(t testing.TB, n int, opts Options) ([]*Env, error) {
	t.Helper()
	log := opts.Logger
	switch {
	case log != nil:
	case opts.Quiet:
		log = zap.NewNop()
	default:
		log = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	set, err := replicaset.Start(replicaset.Config{
		UpstreamConfig: replicaset.UpstreamConfig{Sim: opts.Simulator, SimConfig: opts.Sim, Wrap: opts.Upstream},
		Replicas:       n,
		WS:             true,
		SkipValidate:   true, // a test may give server.New what it refuses
		Gateway: func(up *replicaset.Upstream, _ int, cfg *config.Config) {
			for name, n := range cfg.Networks {
				n.Upstream.Budget = config.Rate{RPS: 1000, Burst: 1000}
				n.Verify = config.Verify{Mode: config.VerifyEnforce, DONs: SimulatorDONs(up.Sim, name)}
			}
			cfg.Teams[0].Rate = config.Rate{}
			if opts.Config != nil {
				opts.Config(cfg)
			}
		},
		Options: func(int) server.Options { return server.Options{Logger: log, Now: opts.Now, Limits: opts.Limits} },
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(set.Close)
	var envs []*Env
	for _, r := range set.Replicas() {
		srv := r.Server
		if !opts.Cold {
			select {
			case <-srv.Warmed():
			case <-time.After(5 * time.Second):
			}
		}
		envs = append(envs, &Env{
			Sim: set.Sim, Server: srv, Gateway: srv.Gateway(), Config: r.Config, Cache: srv.Cache(), Registry: srv.Registry(),
			Mainnet: r.Base("mainnet"), Testnet: r.Base("testnet"),
			UpMainnet: set.URL["mainnet"], UpTestnet: set.URL["testnet"],
		})
	}
	if !opts.Cold {
		set.Sim.ResetCounters()
	}
	return envs, nil
}

// Client signs requests with one key.
type Client struct {
	Key, Secret string
	HTTP        *http.Client
	Now         func() time.Time // signing clock; nil means time.Now
}

// Demo is a client with the demo team's key (every stream, both networks).
func Demo() *Client {
	return &Client{Key: config.DemoKeyID, Secret: config.DemoKeySecret, HTTP: http.DefaultClient}
}

// Research is a client with the research team's key (testnet only, the
// simulator's restricted streams).
func Research() *Client {
	return &Client{Key: config.ResearchKeyID, Secret: config.ResearchKeySecret, HTTP: http.DefaultClient}
}

// Request builds a signed GET of base+target (target as sent on the wire).
func (c *Client) Request(ctx context.Context, base, target string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+target, nil)
	if err != nil {
		return nil, err
	}
	if c.Key != "" {
		now := time.Now
		if c.Now != nil {
			now = c.Now
		}
		auth.Sign(req, c.Key, []byte(c.Secret), now())
	}
	return req, nil
}

// Get sends a signed GET and returns the response with its body read.
func (c *Client) Get(t testing.TB, base, target string) (*http.Response, []byte) {
	t.Helper()
	req, err := c.Request(context.Background(), base, target)
	if err != nil {
		t.Fatalf("servertest: %v", err)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatalf("servertest: GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("servertest: reading %s: %v", target, err)
	}
	return resp, body
}

// FeedID returns the ID of the simulator's stream on network whose base
// and quote assets and schema version match, or fails t.
func (e *Env) FeedID(t testing.TB, network, base, quote, schema string) string {
	t.Helper()
	for _, s := range e.Sim.Streams(network) {
		if s.BaseAsset == base && s.QuoteAsset == quote && s.SchemaVersion == schema {
			return s.FeedID
		}
	}
	t.Fatalf("servertest: no %s %s/%s stream on %s", schema, base, quote, network)
	return ""
}

// UpstreamCalls returns the REST requests the simulator received, all
// networks. The real-time hub's traffic, which demand elsewhere may start
// at any time (its origin discovery, HEAD /, and its WebSocket
// connections), is counted apart (Sim.Counters().WSTotal).
func (e *Env) UpstreamCalls() int64 {
	return e.Sim.Counters().Sum(func(c upstreamsim.Count) bool {
		return c.Endpoint != upstreamsim.EndpointWS && c.Endpoint != upstreamsim.EndpointRoot
	})
}

// SimulatorDONs returns the DON configurations of sim on network, as the
// gateway's configuration takes them.
func SimulatorDONs(sim *upstreamsim.Simulator, network string) []config.DON {
	var out []config.DON
	for _, c := range sim.DON(upstreamsim.NetworkFor(network)) {
		out = append(out, config.DON{ConfigDigest: c.ConfigDigest, F: c.F, Signers: c.Signers})
	}
	return out
}

// LiveFeeds returns the IDs of the first n live streams of sim on network
// (upstreamsim.Testnet or Mainnet), failing t when there are fewer.
func LiveFeeds(t testing.TB, sim *upstreamsim.Simulator, network string, n int) []string {
	t.Helper()
	var feeds []string
	for _, s := range sim.Streams(network) {
		if s.Status == "live" && len(feeds) < n {
			feeds = append(feeds, s.FeedID)
		}
	}
	if len(feeds) < n {
		t.Fatalf("the simulator has %d live streams on %s, %d wanted", len(feeds), network, n)
	}
	return feeds
}
