// This file holds New's steps: one function per part of the assembly, run
// in the order of build.steps, each on what the earlier ones built.

package server

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"streamgate/archive"
	"streamgate/cache"
	"streamgate/candles"
	"streamgate/config"
	"streamgate/don"
	"streamgate/proxy"
	"streamgate/realtime"
	"streamgate/realtime/share"
	"streamgate/redisconn"
	"streamgate/status"
	"streamgate/tracing"
	"streamgate/wsgate"
)

// build is one New in progress: the assembly it fills, the Server it is
// for (whose readiness, facts and admin endpoints the parts are given), and
// what the steps hand each other.
type build struct {
	*assembly
	srv  *Server
	cfg  *config.Config
	opts Options

	metrics  *proxy.Metrics            // the gateway's; the cache counts its waiters in them
	rm       *redisconn.Metrics        // every Redis client's; nil without Redis
	embedded map[string]proxy.Upstream // where the gateway finds the embedded upstream
}

func newBuild(s *Server, cfg *config.Config, opts Options) *build {
	return &build{assembly: s.assembly, srv: s, cfg: cfg, opts: opts}
}

// steps are New's parts in the order they are built. The order matters:
// the cache after its shared tier, the gateway after everything it is
// given, the hubs after the gateway (they use its bulk path and budget),
// the listeners once the handlers exist, the admin listener last.
func (b *build) steps() []func() error {
	return []func() error{
		b.gatewayMetrics,
		b.startEmbedded,
		b.redisMetrics,
		b.sharedTier,
		b.memoryCache,
		b.ownLimits,
		b.verification,
		b.tracing,
		b.usageLedger,
		b.wsEndpoint,
		b.gateway,
		b.archiveStore,
		b.startHubs,
		b.readiness,
		b.bindNetworks,
		b.statusPage,
		b.bindAdmin,
	}
}

// gatewayMetrics registers the gateway's metrics, first.
func (b *build) gatewayMetrics() error {
	b.metrics = proxy.NewMetrics(b.reg)
	return nil
}

// startEmbedded starts the embedded upstream for the networks whose
// upstream is "embedded", each on a loopback port of its own, and keeps
// where the gateway finds them.
func (b *build) startEmbedded() error {
	var names []string
	for _, name := range b.cfg.NetworkNames() {
		if b.cfg.Networks[name].Upstream.Embedded() {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	emb, err := newEmbedded()
	if err != nil {
		return err
	}
	b.emb = emb
	key, secret := emb.credentials()
	b.embedded = map[string]proxy.Upstream{}
	for _, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: emb.handler(name), ReadHeaderTimeout: 10 * time.Second}
		b.upstreams = append(b.upstreams, &served{ln: ln, srv: srv})
		b.embedded[name] = proxy.Upstream{URL: "http://" + ln.Addr().String(), APIKey: key, Secret: []byte(secret)}
	}
	return nil
}

// redisMetrics registers the metrics every Redis client shares, when the
// limits or the shared cache use Redis.
func (b *build) redisMetrics() (err error) {
	if b.cfg.RateLimit.Backend == config.BackendRedis || b.cfg.Cache.Shared.Backend == config.SharedRedis {
		b.rm, err = redisconn.NewMetrics(b.reg)
	}
	return err
}

// sharedTier builds the shared cache tier, when cache.shared asks for one
// (shared.go).
func (b *build) sharedTier() (err error) {
	b.shared, b.sharedRC, err = newShared(b.cfg, b.reg, b.rm, b.log.Named("cache"), b.opts.Now)
	return err
}

// memoryCache builds the response cache, which asks the shared tier when
// there is one, and its size gauge.
func (b *build) memoryCache() (err error) {
	var tier cache.Tier
	if b.shared != nil {
		tier = b.shared
	}
	metrics := b.metrics
	b.store, err = cache.New(cache.Config{
		MaxBytes:     int64(b.cfg.Cache.MaxBytes),
		Clock:        b.opts.Now,
		Logger:       b.log.Named("cache"),
		OnFlightDone: func(_ string, waiters int) { metrics.Waiters(waiters) },
		Shared:       tier,
	})
	if err != nil {
		return err
	}
	store := b.store
	b.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: cache.MetricBytes, Help: "Bytes held by the response cache.",
	}, func() float64 { return float64(store.Bytes()) }))
	return nil
}

// ownLimits builds the limits the ratelimit section describes (limits.go),
// unless Options.Limits gives them.
func (b *build) ownLimits() (err error) {
	b.limits = b.opts.Limits
	if b.limits == nil {
		if b.limits, err = newLimits(b.cfg, b.reg, b.rm, b.log, b.opts.Now); err != nil {
			return err
		}
		b.ownLimit = true
	}
	return nil
}

// verification makes each network's report verification and puts the
// configuration's in force (verify.go).
func (b *build) verification() error {
	b.gates = map[string]*don.Gate{}
	donMetrics := don.NewMetrics(b.reg)
	for _, name := range b.cfg.NetworkNames() {
		b.gates[name] = don.NewGate(name, donMetrics, b.log.Named("verify"))
	}
	return b.setGates(b.cfg)
}

// tracing starts the tracer of the tracing section (off without an
// endpoint).
func (b *build) tracing() (err error) {
	t := b.cfg.Tracing
	b.traces, err = tracing.New(tracing.Config{Endpoint: t.OTLPEndpoint, Protocol: t.Protocol,
		SampleRatio: t.SampleRatio, PropagateUpstream: t.PropagateUpstream, Version: b.version,
		Logger: b.log, Registerer: b.reg})
	return err
}

// wsEndpoint builds the WebSocket endpoint of the realtime section; the
// gateway makes each network's endpoint on its hub (Gateway.Stream).
func (b *build) wsEndpoint() (err error) {
	rt := &b.cfg.Realtime
	b.streams, err = wsgate.New(wsgate.Config{
		Gates: b.gates,
		Queue: rt.ClientQueue, PingInterval: rt.PingInterval, TeamConnections: rt.TeamConnections, Origins: rt.ClientOrigins,
		ResumeWindow: rt.ResumeWindow, ResumeRecordsPerTeam: rt.ResumeRecordsPerTeam, ResumeRecords: rt.ResumeRecords,
		ResumeRedis: b.resumeRedis(), Conns: connsOf(b.limits),
		Metrics: wsgate.NewMetrics(b.reg), Usage: b.usage, Logger: b.log, Now: b.opts.Now,
		SinceMax: rt.SinceMax, SinceRetention: b.cfg.Archive.ServedRetention(),
	})
	return err
}

// resumeRedis is the Redis that shares the stream clients' watermarks:
// the limits' when the replicas share the stream; nil otherwise.
func (b *build) resumeRedis() redis.UniversalClient {
	if !b.cfg.Shared() {
		return nil
	}
	return b.limits.Redis()
}

// connsOf is the limits' count of WebSocket connections across replicas,
// or nil (an interface holding no pointer) with the memory backend.
func connsOf(l *Limits) wsgate.Conns {
	if l.Conns == nil {
		return nil
	}
	return l.Conns
}

// gateway builds the gateway on every part built so far.
func (b *build) gateway() (err error) {
	access := b.opts.AccessLog
	if access == nil {
		access = b.log
	}
	b.gw, err = proxy.New(b.cfg, proxy.Deps{
		Cache:       b.store,
		Shared:      b.shared,
		Limiter:     b.limits.Limiter,
		Quota:       b.limits.Quota,
		Admitter:    b.limits.Admitter,
		Budgets:     b.limits.Budgets,
		ReplayStore: b.limits.ReplayStore,
		Logger:      b.log,
		AccessLog:   access,
		Metrics:     b.metrics,
		Usage:       b.usage,
		Now:         b.opts.Now,
		Embedded:    b.embedded,
		Gates:       b.gates,
		Streams:     b.streams,
		Tracer:      b.traces.Tracer(),

		PropagateUpstream: b.traces.PropagateUpstream(),
	})
	return err
}

// archiveStore opens the archive when the configuration has one and hands
// it to the gateway, which reads it before the upstream and keeps in it
// what it verified (proxy.Archive).
func (b *build) archiveStore() (err error) {
	if b.arch, err = startArchive(b.assembly, b.cfg, b.opts.Now); err != nil {
		return err
	}
	if b.arch == nil {
		return nil
	}
	b.gw.UseArchive(b.arch.gatewayTier())
	// Every stream partition's label is a network of the archive (with
	// sharing: credential, network@partition besides each network).
	b.arch.serveFills(b.gw.ArchivePages(), b.cfg.PartitionLabels())
	b.arch.whenOpen(func(store archive.Store, _ *archive.Writer) {
		if src, ok := store.(candles.Source); ok {
			b.gw.SetHistory(src) // the bars read the archive's rollups
		}
	})
	return nil
}

// startHubs starts the real-time hub of every network that has an upstream
// WebSocket (its ws_url, or the embedded upstream's) and gives it to the
// gateway (Gateway.Stream). Each hub fetches its gaps' reports over the
// gateway's REST bulk path (Gateway.Backfill) and waits on the gateway's
// upstream budget before an origin discovery (Gateway.DiscoveryBudget):
// the gateway is built first, and nothing is bound late. With
// realtime.share and the limits' Redis, the hubs share their connections
// with the other replicas through it.
//
// A network has one hub per stream partition (config.Partitions): with
// sharing: organisation one, under the network's credential; with
// sharing: credential one more per distinct team credential, whose
// connections, within its own ws_max_connections, are opened under that
// credential and serve only its teams. A partition's hub is named by its
// label (network@partition) wherever a network's name is: its metrics,
// its logs, its share keys in Redis, its archive partition.
func (b *build) startHubs() error {
	cfg := b.cfg
	b.hubs = map[string]*realtime.Hub{}
	var metrics *realtime.Metrics
	for _, name := range cfg.NetworkNames() {
		up := cfg.Networks[name].Upstream
		wsURL, orgKey, orgSecret := up.WSURL, up.APIKey, []byte(up.Secret().Reveal())
		if e, ok := b.embedded[name]; ok {
			wsURL, orgKey, orgSecret = "ws"+strings.TrimPrefix(e.URL, "http"), e.APIKey, e.Secret
		}
		if wsURL == "" {
			continue
		}
		if metrics == nil {
			metrics = realtime.NewMetrics(b.reg)
		}
		// An embedded upstream is this process's own: nothing to share.
		var sharing *share.Config
		if _, own := b.embedded[name]; !own && b.limits.Redis() != nil && cfg.Shared() {
			rc := b.limits.Redis()
			sharing = &share.Config{Client: rc, Lease: cfg.Realtime.ShareLease}
		}
		for _, p := range cfg.Partitions(name) {
			key, secret := orgKey, orgSecret
			if p.Name != "" {
				key, secret = p.Credentials.APIKey, []byte(p.Credentials.Secret().Reveal())
			}
			label := p.Label(name)
			// ws_pinned is the network's: a team's own credential may not
			// be entitled to those streams upstream (an upgrade asking one
			// is refused whole), and its teams want what they ask for.
			pinned := up.WSPinned
			if p.Name != "" {
				pinned = nil
			}
			var backfill realtime.BackfillSource
			if f := b.gw.Backfill(name, p.Name); f != nil {
				backfill = realtime.BackfillFunc(f)
			}
			hub, err := realtime.New(realtime.Config{
				Network: label, URL: wsURL, APIKey: key, Secret: secret,
				MaxConnections: up.WSMaxConnections, FeedsPerConnection: up.WSFeedsPerConnection,
				Grace: cfg.Realtime.Grace, Pinned: pinned,
				Logger: b.log.Named("realtime"), Metrics: metrics, Clock: hubClock(b.opts.Now), // the hub adds the network
				Share: sharing, Check: b.gates[name].CheckFrame,
				Backfill: backfill, BackfillMax: cfg.Realtime.BackfillMax, History: cfg.Realtime.ResumeWindow,
				DiscoveryBudget: b.gw.DiscoveryBudget(name, p.Name),
				Frames:          b.archiveFrames(name, p.Name),
				Archive:         b.gw.ArchiveRange(name, p.Name), // nil without an archive
			})
			if err != nil {
				return fmt.Errorf("network %s: real-time hub: %w", label, err)
			}
			b.hubs[label] = hub
			b.gw.Stream(name, p.Name, hub)
		}
	}
	return nil
}

// archiveFrames is where the hub of partition part of network name hands
// each new report: the archive, when the gateway has one; else nowhere.
// What it hands before the archive is open is written once it opens.
func (b *build) archiveFrames(name, part string) func(realtime.Frame) {
	if b.arch == nil {
		return nil
	}
	frames, opened := b.gw.ArchiveFrames(name, part)
	if opened != nil {
		b.arch.whenOpen(func(archive.Store, *archive.Writer) { opened() })
	}
	return frames
}

// hubClock is the hubs' clock: now's time (Options.Now), with the wall
// clock's timers; nil (the real clock) without now.
func hubClock(now func() time.Time) clockwork.Clock {
	if now == nil {
		return nil
	}
	return nowClock{Clock: clockwork.NewRealClock(), now: now}
}

// nowClock is a clockwork.Clock whose time is now's.
type nowClock struct {
	clockwork.Clock
	now func() time.Time
}

func (c nowClock) Now() time.Time                  { return c.now() }
func (c nowClock) Since(t time.Time) time.Duration { return c.now().Sub(t) }
func (c nowClock) Until(t time.Time) time.Duration { return t.Sub(c.now()) }

// readiness registers streamgate_ready, the Server's Ready.
func (b *build) readiness() error {
	s := b.srv
	b.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "streamgate_ready", Help: "1 while /readyz answers 200: every upstream has answered, the process is not draining, and it does not refuse every request (ratelimit.redis.fail_mode closed with Redis away).",
	}, func() float64 {
		if s.Ready() {
			return 1
		}
		return 0
	}))
	return nil
}

// bindNetworks binds the gateway's listeners (one per address; networks
// sharing one are routed by Host), each with its TLS when it has a block.
func (b *build) bindNetworks() error {
	for _, l := range b.gw.Listeners() {
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", l.Addr, err)
		}
		errorLog := b.errorLog(listenerName(l.Networks), networkTLS(l.Networks)(b.cfg) != nil)
		sv := &served{ln: ln, srv: proxy.NewServer(l.Handler, b.cfg.Server, errorLog)}
		b.networks = append(b.networks, sv)
		if err := b.tlsListener(sv, listenerName(l.Networks), networkTLS(l.Networks), b.cfg); err != nil {
			return err
		}
		for _, name := range l.Networks {
			b.addrs[name] = ln.Addr().String()
		}
	}
	return nil
}

// statusPage builds the status page's sampler on the registry and the
// Server's facts (admin.go); the configuration counts as loaded now.
func (b *build) statusPage() error {
	loaded := time.Now()
	b.srv.loadedAt.Store(&loaded)
	b.status = status.New(status.Options{Gatherer: b.reg, Facts: b.srv.statusFacts, Interval: b.opts.StatusInterval})
	return nil
}

// bindAdmin binds the admin listener (admin.go), unless
// server.admin_listen is "".
func (b *build) bindAdmin() error {
	cfg := b.cfg
	if cfg.Server.AdminListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", cfg.Server.AdminListen)
	if err != nil {
		return fmt.Errorf("admin listener on %s: %w", cfg.Server.AdminListen, err)
	}
	errorLog := b.errorLog("admin", cfg.Server.AdminTLS != nil)
	b.admin = &served{ln: ln, srv: proxy.NewServer(b.srv.adminHandler(), cfg.Server, errorLog)}
	b.addrs["admin"] = ln.Addr().String()
	return b.tlsListener(b.admin, "admin", adminTLS, cfg)
}
