// Package server assembles a whole streamgate from a configuration: the
// embedded upstream when the configuration asks for one (in builds that
// carry it, embedded.go), the cache, the limits (in memory or Redis), the
// metrics, the gateway, and its listeners with the admin endpoints; and
// the loggers the binary passes it (logs.go). It owns everything it
// starts: New builds and binds, Start serves, Reload applies a new
// configuration, Shutdown drains and releases. The binary, the load tool
// and the tests all build their gateway with it, so what is tested and
// measured is what ships.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/certs"
	"streamgate/config"
	"streamgate/don"
	"streamgate/proxy"
	"streamgate/ratelimit"
	"streamgate/realtime"
	"streamgate/realtime/share"
	"streamgate/redisconn"
	"streamgate/status"
	"streamgate/tracing"
	"streamgate/wsgate"
)

// Options are a Server's dependencies besides its configuration. Every
// field may be left zero.
type Options struct {
	// Logger receives the process's logs. Nil: nothing is logged.
	Logger *zap.Logger
	// AccessLog receives one line per request. Nil: Logger.
	AccessLog *zap.Logger
	// Registry receives the metrics; /metrics serves it. Nil: a new one.
	Registry *prometheus.Registry
	// Now is the clock of the cache, the gateway, the team quotas and the
	// real-time hubs' signatures and reports (the upstream budget and the
	// hubs' connection timers always follow the wall clock). Nil:
	// time.Now.
	Now func() time.Time
	// Limits, if non-nil, are used instead of the ones the configuration's
	// ratelimit section describes; the Server does not close them.
	Limits *Limits
	// Version is shown on the status page. Empty: "dev".
	Version string
	// StatusInterval is how often the status page's sampler gathers the
	// metrics. Zero: status.DefaultInterval.
	StatusInterval time.Duration
}

// Server is a running gateway. Its methods are safe for concurrent use.
type Server struct {
	log      *zap.Logger
	reg      *prometheus.Registry
	cfg      atomic.Pointer[config.Config] // in force
	emb      embedded                      // the embedded upstream, or nil
	store    *cache.Store
	shared   *shared.Tier      // nil: off
	sharedRC *redisconn.Client // the shared tier's client, nil when off
	limits   *Limits
	ownLimit bool
	gw       *proxy.Gateway
	streams  *wsgate.Gate // the WebSocket endpoint
	hubs     map[string]*realtime.Hub
	gates    map[string]*don.Gate // report verification per network
	status   *status.Sampler
	version  string
	loadedAt atomic.Pointer[time.Time]     // when the configuration in force was loaded
	reloaded atomic.Pointer[status.Reload] // the last reload's outcome

	upstreams []*served // the embedded upstream's listeners
	networks  []*served // the gateway's listeners
	admin     *served   // nil when disabled
	addrs     map[string]string

	draining atomic.Bool
	started  atomic.Bool
	warmStop context.CancelFunc
	warmDone chan struct{}
	once     sync.Once
	closeErr error

	certMetrics *certs.Metrics    // registered with the first TLS listener
	errorLogs   []*errorLog       // the listeners' http.Server.ErrorLog
	traces      *tracing.Provider // nil: tracing off
	arch        *archiveRun       // nil: archive off
}

// served is a bound listener and the server that will serve it.
type served struct {
	ln  net.Listener
	srv *http.Server

	tls      *certs.Source                    // nil: plain HTTP
	tlsBlock func(*config.Config) *config.TLS // where a configuration gives its files
}

// New builds the gateway cfg describes (cfg must be valid: config.Load and
// config.Parse validate) and binds every listener, so that Addr answers
// before Start. It does not change cfg. On error, whatever it had started
// is released.
func New(cfg *config.Config, opts Options) (_ *Server, err error) {
	s := &Server{log: opts.Logger, reg: opts.Registry, addrs: map[string]string{}, warmDone: make(chan struct{})}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	if err := CheckBuild(cfg); err != nil {
		return nil, err
	}
	s.cfg.Store(cfg)
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	metrics := proxy.NewMetrics(s.reg)

	embedded, err := s.startEmbedded(cfg)
	if err != nil {
		return nil, err
	}
	var rm *redisconn.Metrics // every Redis client's
	if cfg.RateLimit.Backend == config.BackendRedis || cfg.Cache.Shared.Backend == config.SharedRedis {
		if rm, err = redisconn.NewMetrics(s.reg); err != nil {
			return nil, err
		}
	}
	if s.shared, s.sharedRC, err = newShared(cfg, s.reg, rm, s.log.Named("cache"), opts.Now); err != nil {
		return nil, err
	}
	var tier cache.Tier // the Store asks the shared tier, when there is one
	if s.shared != nil {
		tier = s.shared
	}
	s.store, err = cache.New(cache.Config{
		MaxBytes:     int64(cfg.Cache.MaxBytes),
		Clock:        opts.Now,
		Logger:       s.log.Named("cache"),
		OnFlightDone: func(_ string, waiters int) { metrics.Waiters(waiters) },
		Shared:       tier,
	})
	if err != nil {
		return nil, err
	}
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: cache.MetricBytes, Help: "Bytes held by the response cache.",
	}, func() float64 { return float64(s.store.Bytes()) }))

	s.limits = opts.Limits
	if s.limits == nil {
		if s.limits, err = newLimits(cfg, s.reg, rm, s.log, opts.Now); err != nil {
			return nil, err
		}
		s.ownLimit = true
	}
	s.gates = map[string]*don.Gate{}
	donMetrics := don.NewMetrics(s.reg)
	for _, name := range cfg.NetworkNames() {
		s.gates[name] = don.NewGate(name, donMetrics, s.log.Named("verify"))
	}
	if err := s.setGates(cfg); err != nil {
		return nil, err
	}
	access := opts.AccessLog
	if access == nil {
		access = s.log
	}
	version := opts.Version
	if version == "" {
		version = "dev"
	}
	if s.traces, err = tracing.New(tracing.Config{Endpoint: cfg.Tracing.OTLPEndpoint, Protocol: cfg.Tracing.Protocol,
		SampleRatio: cfg.Tracing.SampleRatio, PropagateUpstream: cfg.Tracing.PropagateUpstream, Version: version,
		Logger: s.log, Registerer: s.reg}); err != nil {
		return nil, err
	}
	if s.streams, err = s.newStreams(cfg, opts.Now); err != nil {
		return nil, err
	}
	s.gw, err = proxy.New(cfg, proxy.Deps{
		Cache:       s.store,
		Shared:      s.shared,
		Limiter:     s.limits.Limiter,
		Quota:       s.limits.Quota,
		Admitter:    s.limits.Admitter,
		Budgets:     s.limits.Budgets,
		ReplayStore: s.limits.ReplayStore,
		Logger:      s.log,
		AccessLog:   access,
		Metrics:     metrics,
		Now:         opts.Now,
		Embedded:    embedded,
		Gates:       s.gates,
		Streams:     s.streams,
		Tracer:      s.traces.Tracer(),

		PropagateUpstream: s.traces.PropagateUpstream(),
	})
	if err != nil {
		return nil, err
	}
	if s.arch, err = s.startArchive(cfg, opts.Now); err != nil {
		return nil, err
	}
	s.gw.UseArchive(s.arch.gatewayTier())
	// The hubs are built after the gateway, each with the gateway's bulk
	// path for its gaps and its budget for its origin discovery, and then
	// handed to it: nothing is bound late.
	if err := s.startHubs(cfg, embedded, opts.Now); err != nil {
		return nil, err
	}
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "streamgate_ready", Help: "1 while /readyz answers 200: every upstream has answered, the process is not draining, and it does not refuse every request (ratelimit.redis.fail_mode closed with Redis away).",
	}, func() float64 {
		if s.Ready() {
			return 1
		}
		return 0
	}))

	for _, l := range s.gw.Listeners() {
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", l.Addr, err)
		}
		errorLog := s.errorLog(listenerName(l.Networks), networkTLS(l.Networks)(cfg) != nil)
		sv := &served{ln: ln, srv: proxy.NewServer(l.Handler, cfg.Server, errorLog)}
		s.networks = append(s.networks, sv)
		if err := s.tlsListener(sv, listenerName(l.Networks), networkTLS(l.Networks), cfg); err != nil {
			return nil, err
		}
		for _, name := range l.Networks {
			s.addrs[name] = ln.Addr().String()
		}
	}
	s.version = version
	loaded := time.Now()
	s.loadedAt.Store(&loaded)
	s.status = status.New(status.Options{Gatherer: s.reg, Facts: s.statusFacts, Interval: opts.StatusInterval})
	if cfg.Server.AdminListen != "" {
		ln, err := net.Listen("tcp", cfg.Server.AdminListen)
		if err != nil {
			return nil, fmt.Errorf("admin listener on %s: %w", cfg.Server.AdminListen, err)
		}
		errorLog := s.errorLog("admin", cfg.Server.AdminTLS != nil)
		s.admin = &served{ln: ln, srv: proxy.NewServer(s.adminHandler(), cfg.Server, errorLog)}
		s.addrs["admin"] = ln.Addr().String()
		if err := s.tlsListener(s.admin, "admin", adminTLS, cfg); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// embedded is the upstream of the networks whose upstream.url is
// "embedded": the simulator (embedded.go), left out of builds with the tag
// nosimulator (embedded_none.go).
type embedded interface {
	handler(network string) http.Handler
	credentials() (key, secret string)
	dons(network string) []config.DON // the DON configurations it signs with
	close()
}

// errNoEmbedded is CheckBuild's problem in a build without the simulator.
var errNoEmbedded = errors.New("this build leaves out the embedded upstream (built with -tags nosimulator): give the upstream's URL")

// CheckBuild returns what of cfg this build cannot run, or nil: a network
// whose upstream is "embedded", in a build without the embedded upstream
// (EmbeddedUpstream false). New refuses such a configuration; check
// reports it.
func CheckBuild(cfg *config.Config) error { return checkBuild(cfg, EmbeddedUpstream) }

func checkBuild(cfg *config.Config, embeddable bool) error {
	if embeddable {
		return nil
	}
	var errs []error
	for _, name := range cfg.NetworkNames() {
		if cfg.Networks[name].Upstream.Embedded() {
			errs = append(errs, fmt.Errorf("networks.%s.upstream.url: %q: %w", name, config.EmbeddedURL, errNoEmbedded))
		}
	}
	return errors.Join(errs...)
}

// startEmbedded starts the embedded upstream for the networks whose
// upstream is "embedded", each on a loopback port of its own, and returns
// where the gateway finds them.
func (s *Server) startEmbedded(cfg *config.Config) (map[string]proxy.Upstream, error) {
	var names []string
	for _, name := range cfg.NetworkNames() {
		if cfg.Networks[name].Upstream.Embedded() {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	emb, err := newEmbedded()
	if err != nil {
		return nil, err
	}
	s.emb = emb
	key, secret := emb.credentials()
	out := map[string]proxy.Upstream{}
	for _, name := range names {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: emb.handler(name), ReadHeaderTimeout: 10 * time.Second}
		s.upstreams = append(s.upstreams, &served{ln: ln, srv: srv})
		out[name] = proxy.Upstream{URL: "http://" + ln.Addr().String(), APIKey: key, Secret: []byte(secret)}
	}
	return out, nil
}

// startHubs starts the real-time hub of every network that has an upstream
// WebSocket (its ws_url, or the embedded upstream's) and gives it to the
// gateway (Gateway.Stream). Each hub fetches its gaps' reports over the
// gateway's REST bulk path (Gateway.Backfill) and waits on the gateway's
// upstream budget before an origin discovery (Gateway.DiscoveryBudget):
// the gateway is built first. With realtime.share and the limits' Redis,
// the hubs share their connections with the other replicas through it.
func (s *Server) startHubs(cfg *config.Config, embedded map[string]proxy.Upstream, now func() time.Time) error {
	s.hubs = map[string]*realtime.Hub{}
	var metrics *realtime.Metrics
	for _, name := range cfg.NetworkNames() {
		up := cfg.Networks[name].Upstream
		wsURL, key, secret := up.WSURL, up.APIKey, []byte(up.Secret().Reveal())
		if e, ok := embedded[name]; ok {
			wsURL, key, secret = "ws"+strings.TrimPrefix(e.URL, "http"), e.APIKey, e.Secret
		}
		if wsURL == "" {
			continue
		}
		if metrics == nil {
			metrics = realtime.NewMetrics(s.reg)
		}
		// An embedded upstream is this process's own: nothing to share.
		var sharing *share.Config
		if _, own := embedded[name]; !own && s.limits.Redis() != nil && cfg.Shared() {
			rc := s.limits.Redis()
			sharing = &share.Config{Client: rc, Lease: cfg.Realtime.ShareLease}
		}
		var backfill realtime.BackfillSource
		if f := s.gw.Backfill(name); f != nil {
			backfill = realtime.BackfillFunc(f)
		}
		hub, err := realtime.New(realtime.Config{
			Network: name, URL: wsURL, APIKey: key, Secret: secret,
			MaxConnections: up.WSMaxConnections, FeedsPerConnection: up.WSFeedsPerConnection,
			Grace: cfg.Realtime.Grace, Pinned: up.WSPinned,
			Logger: s.log.Named("realtime"), Metrics: metrics, Clock: hubClock(now), // the hub adds the network
			Share: sharing, Check: s.gates[name].CheckFrame,
			Backfill: backfill, BackfillMax: cfg.Realtime.BackfillMax, History: cfg.Realtime.ResumeWindow,
			DiscoveryBudget: s.gw.DiscoveryBudget(name),
		})
		if err != nil {
			return fmt.Errorf("network %s: real-time hub: %w", name, err)
		}
		s.hubs[name] = hub
		s.gw.Stream(name, hub)
	}
	return nil
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

// resumeRedis is the Redis that shares the stream clients' watermarks:
// the limits' when the replicas share the stream; nil otherwise.
func (s *Server) resumeRedis(cfg *config.Config) redis.UniversalClient {
	if !cfg.Shared() {
		return nil
	}
	return s.limits.Redis()
}

// Start serves every listener and loads each network's catalog in the
// background (tried again until its upstream answers, which makes the
// server ready). It returns at once.
func (s *Server) Start() {
	if !s.started.CompareAndSwap(false, true) {
		return
	}
	for _, sv := range s.upstreams {
		go sv.srv.Serve(sv.ln)
	}
	for _, sv := range s.networks {
		go func() {
			if err := sv.serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("listener stopped", zap.String("addr", sv.ln.Addr().String()), zap.Error(err))
			}
		}()
	}
	s.status.Start()
	if s.admin != nil {
		go s.admin.serve()
		s.log.Info("admin listening", zap.String("addr", s.addrs["admin"]))
	}
	if s.emb != nil {
		s.log.Info("embedded upstream started")
	}
	cfg := s.cfg.Load()
	for _, name := range s.gw.Networks() {
		s.log.Info("serving network", zap.String("network", name), zap.String("listen", s.addrs[name]),
			zap.Strings("hosts", cfg.Networks[name].Hosts), zap.Bool("tls", cfg.Networks[name].TLS != nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.warmStop = cancel
	go func() {
		defer close(s.warmDone)
		s.gw.Warm(ctx)
	}()
}

// Warmed is closed when the background catalog warm-up has ended: every
// network's catalog is loaded (or Shutdown stopped it).
func (s *Server) Warmed() <-chan struct{} { return s.warmDone }

// Run starts the server, serves until ctx ends, then drains within
// server.shutdown_timeout.
func (s *Server) Run(ctx context.Context) error {
	s.Start()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Load().Server.ShutdownTimeout)
	defer cancel()
	return s.Shutdown(sctx)
}

// Addr returns the address a network ("mainnet", …) or the admin listener
// ("admin") is bound to, or "".
func (s *Server) Addr(name string) string { return s.addrs[name] }

// Gateway, Cache and Registry give access to the parts, for the tools and
// tests that look inside (and Simulator, in builds that carry it).
func (s *Server) Gateway() *proxy.Gateway        { return s.gw }
func (s *Server) Cache() *cache.Store            { return s.store }
func (s *Server) Registry() *prometheus.Registry { return s.reg }

// Hub returns the real-time hub of network, or nil.
func (s *Server) Hub(network string) *realtime.Hub { return s.hubs[network] }

// Ready reports whether every upstream has answered, the server is not
// draining and it does not refuse every request (fail_mode closed while
// the limits' Redis cannot be used): what /readyz answers.
func (s *Server) Ready() bool { return !s.draining.Load() && s.gw.Ready() && s.refusing() == "" }

// refusing says why the replica refuses every request now, "" when it
// does not: ratelimit.redis.fail_mode closed, while the limits' Redis
// cannot be used.
func (s *Server) refusing() string {
	if s.limits == nil {
		return ""
	}
	if h := s.limits.Refusing(); h != "" {
		return h + "; ratelimit.redis.fail_mode closed refuses every request"
	}
	return ""
}

// Reload applies the teams, keys, limits and lifetimes of next. A next
// that the gateway refuses changes nothing. It returns the settings next
// changes that only a restart applies; they keep their running values.
func (s *Server) Reload(next *config.Config) (restartOnly []string, err error) {
	states, err := s.gateStates(next)
	if err != nil {
		s.ReloadRefused(err)
		return nil, err
	}
	if err := s.gw.Reload(next); err != nil {
		s.ReloadRefused(err)
		return nil, err
	}
	var stricter []string
	for name, st := range states {
		if g := s.gates[name]; g != nil && g.Set(st.mode, st.v) {
			stricter = append(stricter, name)
		}
	}
	s.recheckAdmitted(stricter)
	// A listener's files that do not load are refused by its Source
	// (logged, counted); the rest of next applies.
	_ = s.reloadTLS(next)
	running := s.cfg.Load()
	restartOnly = config.RestartOnly(running, next)
	s.cfg.Store(next)
	now := time.Now()
	s.loadedAt.Store(&now)
	s.reloaded.Store(&status.Reload{At: now, OK: true})
	return restartOnly, nil
}

// recheckAdmitted drops what was admitted under verification rules a
// reload made stricter on networks (mode enforce where it was not, a DON
// configuration removed or changed): the memory cache is emptied (its
// entries are not tagged by network; each is fetched again when asked,
// and whatever is read from the shared tier is verified as it enters, by
// the rules now in force), and the hub of each network drops the frames
// of its history and its newest reports that no longer pass.
func (s *Server) recheckAdmitted(networks []string) {
	if len(networks) == 0 {
		return
	}
	s.store.Clear()
	for _, name := range networks {
		frames := 0
		if h := s.hubs[name]; h != nil {
			frames = h.Recheck(s.gates[name].AdmitsFrame)
		}
		s.log.Info("report verification made stricter: the memory cache was emptied and the stream's held reports checked again",
			zap.String("network", name), zap.Int("stream_frames_dropped", frames))
	}
}

// ReloadRefused records a reload that did not happen (a configuration file
// with problems), for the status page.
func (s *Server) ReloadRefused(err error) {
	s.reloaded.Store(&status.Reload{At: time.Now(), OK: false, Error: err.Error()})
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
	for _, name := range cfg.NetworkNames() {
		n := status.NetworkInfo{Name: name, BudgetRPS: cfg.Networks[name].Upstream.Budget.RPS}
		if h := s.hubs[name]; h != nil {
			n.Hub = h.Stats
		}
		f.Networks = append(f.Networks, n)
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
		f.Teams = append(f.Teams, ti)
	}
	return f
}

// Status is the status page's sampler.
func (s *Server) Status() *status.Sampler { return s.status }

// Shutdown drains: /readyz answers 503 at once; the replica goes on
// serving for realtime.drain_delay (when it streams), so that a balancer
// stops routing to it; then the listeners stop accepting and the requests
// in flight are finished (connections still open when ctx ends are
// closed), the stream clients are closed in steps (an HA client's two
// connections never together), the hubs hand over and close, then the
// embedded upstream they may still be calling stops, then the admin
// listener; finally the cache and the limits are released. It returns the
// first error of the drain. Close skips the delay and the steps.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		s.draining.Store(true)
		s.log.Info("draining")
		// Not ready from now on; the stream clients keep streaming for
		// realtime.drain_delay, so that the balancer stops routing to this
		// replica before any of them reconnects.
		if d := drainDelay(ctx, s.cfg.Load().Realtime.DrainDelay); d > 0 && len(s.hubs) > 0 && s.gw != nil {
			s.log.Info("streaming on while the balancer lets this replica go", zap.Duration("drain_delay", d))
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
		if s.warmStop != nil {
			s.warmStop()
			<-s.warmDone
		}
		err := shutdown(ctx, s.networks)
		if err != nil {
			s.log.Warn("drain incomplete: closing the connections still open", zap.Error(err))
		}
		// Then the stream clients are closed (1001) in steps, an HA
		// client's second connection once its first has reconnected
		// (wsgate.Gate.DrainStreams); closing the hubs ends the
		// subscriptions of any left. A sharing hub first hands its chunks
		// over to another replica (within realtime.share_lease): the hubs
		// close together.
		if s.streams != nil {
			s.streams.DrainStreams(ctx)
		}
		s.status.Stop()
		var hubs sync.WaitGroup
		for _, h := range s.hubs {
			hubs.Go(h.Close)
		}
		hubs.Wait()
		s.hubs = nil
		s.streams.Close()
		s.gw.Close()
		shutdown(ctx, s.upstreams)
		if s.admin != nil {
			shutdown(ctx, []*served{s.admin})
		}
		s.release()
		s.log.Info("stopped")
		s.closeErr = err
	})
	return s.closeErr
}

// drainDelay is realtime.drain_delay within the drain's time: at most half
// of what is left of ctx, so that the listeners and the stream clients
// have the rest.
func drainDelay(ctx context.Context, d time.Duration) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)/2)
	}
	return d
}

// Close stops at once, without draining.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.Shutdown(ctx)
}

// release frees what New built. Listeners never served are closed.
func (s *Server) release() {
	if s.status != nil {
		s.status.Stop()
	}
	s.streams.Close()
	if s.gw != nil {
		s.gw.Close()
	}
	s.closeTLS()
	for _, group := range [][]*served{s.networks, s.upstreams, {s.admin}} {
		for _, sv := range group {
			if sv != nil {
				sv.ln.Close()
			}
		}
	}
	for _, el := range s.errorLogs {
		el.Close() // the counts of lines not written yet
	}
	for _, h := range s.hubs {
		h.Close()
	}
	s.arch.close()
	if s.store != nil {
		s.store.Close()
	}
	if s.sharedRC != nil {
		s.sharedRC.Close()
	}
	if s.limits != nil && s.ownLimit {
		s.limits.Close()
	}
	if s.emb != nil {
		s.emb.close()
	}
	if s.traces != nil {
		// What is pending is exported, within a bound: a collector that
		// does not answer does not hold the exit.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.traces.Shutdown(ctx); err != nil {
			s.log.Warn("tracing: spans not exported at shutdown", zap.Error(err))
		}
	}
}

// shutdown shuts the servers down together, closes those that do not
// finish within ctx, and returns the first error.
func shutdown(ctx context.Context, group []*served) error {
	errs := make([]error, len(group))
	var wg sync.WaitGroup
	for i, sv := range group {
		wg.Go(func() {
			if errs[i] = sv.srv.Shutdown(ctx); errs[i] != nil {
				sv.srv.Close()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// newStreams builds the WebSocket endpoint of cfg's realtime section; the
// gateway makes each network's endpoint on its hub (Gateway.Stream).
func (s *Server) newStreams(cfg *config.Config, now func() time.Time) (*wsgate.Gate, error) {
	rt := &cfg.Realtime
	return wsgate.New(wsgate.Config{
		Gates: s.gates,
		Queue: rt.ClientQueue, PingInterval: rt.PingInterval, TeamConnections: rt.TeamConnections, Origins: rt.ClientOrigins,
		ResumeWindow: rt.ResumeWindow, ResumeRecordsPerTeam: rt.ResumeRecordsPerTeam, ResumeRecords: rt.ResumeRecords,
		ResumeRedis: s.resumeRedis(cfg), Conns: connsOf(s.limits),
		Metrics: wsgate.NewMetrics(s.reg), Logger: s.log, Now: now,
	})
}

// connsOf is the limits' count of WebSocket connections across replicas,
// or nil (an interface holding no pointer) with the memory backend.
func connsOf(l *Limits) wsgate.Conns {
	if l.Conns == nil {
		return nil
	}
	return l.Conns
}

// gateState is the verification of one network as a configuration states
// it.
type gateState struct {
	mode string
	v    *don.Verifier
}

// gateStates builds the verification of every network of cfg: its mode
// and the DON configurations to trust; an embedded upstream with none
// configured trusts the simulator's DON.
func (s *Server) gateStates(cfg *config.Config) (map[string]gateState, error) {
	out := map[string]gateState{}
	for _, name := range cfg.NetworkNames() {
		n := cfg.Networks[name]
		mode := n.VerifyMode()
		if mode == config.VerifyOff {
			out[name] = gateState{mode: don.ModeOff}
			continue
		}
		vf := n.Verify
		if !vf.Configured() && n.Upstream.Embedded() && s.emb != nil {
			vf.DONs = append(vf.DONs, s.emb.dons(name)...)
		}
		v, err := vf.Verifier()
		if err != nil {
			return nil, fmt.Errorf("networks.%s.verify: %w", name, err)
		}
		out[name] = gateState{mode: mode, v: v}
	}
	return out, nil
}

// setGates puts the verification of cfg in force.
func (s *Server) setGates(cfg *config.Config) error {
	states, err := s.gateStates(cfg)
	if err != nil {
		return err
	}
	for name, st := range states {
		s.gates[name].Set(st.mode, st.v)
		if st.mode != don.ModeOff {
			s.log.Info("reports verified against the DON's signatures", zap.String("network", name),
				zap.String("mode", st.mode), zap.Int("don_configurations", st.v.Len()))
		} else {
			s.log.Info("reports not verified: no DON configuration", zap.String("network", name))
		}
	}
	return nil
}

// Gate returns the report verification of a network, or nil.
func (s *Server) Gate(network string) *don.Gate { return s.gates[network] }
