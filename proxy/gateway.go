// Package proxy is the HTTP side of streamgate: it serves the Data Streams
// API to an organisation's teams, checks each request (signature, network,
// entitlement, quota) before anything reaches the upstream, answers what it
// can from the cache, and forwards the rest, re-signed with the
// organisation's credentials.
//
// One Gateway serves every configured network; Handler returns the handler
// of one network and Listeners the handlers per listen address, routing by
// Host where networks share one.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/config"
	"streamgate/ratelimit"
)

// Deps are the collaborators of a Gateway. Cache is required; the rest have
// defaults.
type Deps struct {
	// Cache holds responses. Required.
	Cache *cache.Store
	// Limiter counts team and key rates. If nil, a memory limiter is used.
	Limiter ratelimit.Limiter
	// Quota counts daily quotas. If nil, a memory quota is used.
	Quota ratelimit.Quota
	// Budgets spend the upstream budget of each network, by network name.
	// A network without one gets a memory budget of its own: the
	// configured budget always applies.
	Budgets map[string]ratelimit.Budget
	// ReplayStore, if non-nil, shares the record of signatures seen with
	// the other replicas (see auth.VerifierConfig.Shared).
	ReplayStore auth.ReplayStore
	// Transport makes upstream calls. If nil, a clone of
	// http.DefaultTransport tuned for one busy upstream host is used.
	Transport http.RoundTripper
	// Logger receives error and audit logs. If nil, nothing is logged.
	Logger *zap.Logger
	// AccessLog receives one line per request. If nil, Logger does.
	AccessLog *zap.Logger
	// Metrics records metrics. If nil, nothing is recorded.
	Metrics *Metrics
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// Gateway serves the API on every configured network. It is safe for
// concurrent use; Reload swaps teams, keys, limits and lifetimes while it
// serves.
type Gateway struct {
	pol      atomic.Pointer[policy]
	networks map[string]*network
	cache    *cache.Store
	limiter  ratelimit.Limiter
	quota    ratelimit.Quota
	log      *zap.Logger
	auditLog *zap.Logger
	metrics  *Metrics
	now      func() time.Time

	// unknownHost answers a Host no network of a shared listener serves,
	// observed (access log, metrics, request ID) like every answer.
	unknownHost http.Handler

	replayStore  auth.ReplayStore
	replayRecord *auth.ReplayRecord // the signatures seen, kept across reloads
	replayLogged atomic.Int64       // Unix seconds of the last log line of a replay store failure
}

// replayStoreFailed counts a failure of the shared replay store and logs it
// at most once a minute; the replica's own record decides meanwhile.
func (g *Gateway) replayStoreFailed(err error) {
	g.metrics.replayStoreError()
	now := time.Now().Unix()
	if last := g.replayLogged.Load(); now-last >= 60 && g.replayLogged.CompareAndSwap(last, now) {
		g.log.Warn("shared replay record unavailable; each replica checks replays on its own meanwhile", zap.Error(err))
	}
}

var _ http.Handler = (*network)(nil)

// policy is the reloadable part of the configuration, parsed once.
type policy struct {
	keys             *auth.KeyStore
	verifier         *auth.Verifier
	teams            map[string]*teamPolicy
	anonymousCatalog bool
	anonymousRate    ratelimit.Limit // per client address
	catalogTTL       time.Duration
	latestTTL        time.Duration
	negativeTTL      time.Duration
	audit            bool
}

type teamPolicy struct {
	rate     ratelimit.Limit
	keyRates map[string]ratelimit.Limit
	daily    int64
	creds    map[string]*credential // own upstream credentials by network
}

// network serves one network: its upstream, its catalog views, its
// pass-through proxy.
type network struct {
	g       *Gateway
	name    string
	listen  string
	hosts   []string
	up      *upstream
	org     *credential
	maxBulk int
	// passPaths are the paths under /api/v1/ the operator listed for
	// pass-through; every other unknown path is 404.
	passPaths map[string]bool
	cat       catalogs
	rp        *httputil.ReverseProxy
	handler   http.Handler
}

// New builds a Gateway for cfg, which must be valid (config.Parse validates)
// and name a real upstream URL for every network: "embedded" must have been
// resolved by the caller.
func New(cfg *config.Config, deps Deps) (*Gateway, error) {
	if deps.Cache == nil {
		return nil, errors.New("proxy: Deps.Cache is required")
	}
	g := &Gateway{
		networks: map[string]*network{},
		cache:    deps.Cache,
		limiter:  deps.Limiter,
		quota:    deps.Quota,
		log:      deps.Logger,
		metrics:  deps.Metrics,
		now:      deps.Now,
	}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	g.auditLog = g.log.Named("audit")
	accessLog := deps.AccessLog
	if accessLog == nil {
		accessLog = g.log
	}
	if g.now == nil {
		g.now = time.Now
	}
	g.unknownHost = observe("unknown-host", accessLog, g.metrics, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refuseBody(w, r)
		writeError(w, errorf(http.StatusNotFound, "unknown host: no network is served under this name"))
	}))
	var err error
	if g.limiter == nil {
		if g.limiter, err = ratelimit.NewMemory(ratelimit.Options{Name: "team", Now: g.now}); err != nil {
			return nil, err
		}
	}
	if g.quota == nil {
		if g.quota, err = ratelimit.NewMemoryQuota(ratelimit.Options{Name: "daily", Now: g.now}); err != nil {
			return nil, err
		}
	}
	g.replayStore = deps.ReplayStore
	g.replayRecord = auth.NewReplayRecord()
	g.metrics.replayRecord(func() auth.ReplayStats { return g.policy().verifier.Stats() })
	pol, err := g.buildPolicy(cfg)
	if err != nil {
		return nil, err
	}
	g.pol.Store(pol)

	transport := deps.Transport
	if transport == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns = 512
		t.MaxIdleConnsPerHost = 256
		t.IdleConnTimeout = 90 * time.Second
		transport = t
	}
	var errs []error
	for _, name := range cfg.NetworkNames() {
		nc := cfg.Networks[name]
		base, err := url.Parse(nc.Upstream.URL)
		if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
			errs = append(errs, fmt.Errorf("proxy: network %s: upstream url must be http(s), got %q", name, nc.Upstream.URL))
			continue
		}
		base.Path, base.RawPath = strings.TrimRight(base.Path, "/"), ""
		n := &network{
			g:         g,
			name:      name,
			listen:    nc.Listen,
			hosts:     nc.Hosts,
			maxBulk:   nc.Upstream.MaxBulk,
			passPaths: map[string]bool{},
			org:       &credential{key: nc.Upstream.APIKey, secret: []byte(nc.Upstream.Secret().Reveal())},
		}
		for _, p := range nc.PassThrough {
			n.passPaths[p] = true
		}
		budget := deps.Budgets[name]
		if budget == nil {
			if budget, err = ratelimit.NewMemoryBudget(ratelimit.Options{Name: "budget", Network: name, Now: g.now}); err != nil {
				return nil, err
			}
		}
		n.up = &upstream{
			network: name,
			base:    base,
			client:  &http.Client{Transport: transport, CheckRedirect: noRedirects},
			timeout: nc.Upstream.Timeout,
			retries: nc.Upstream.Retries,
			budget:  budget,
			limit:   ratelimit.Limit{Rate: nc.Upstream.Budget.RPS, Burst: nc.Upstream.Budget.Burst},
			log:     g.log,
			metrics: g.metrics,
		}
		n.up.catalogHeld = n.catalogHeld
		n.rp = n.reverseProxy(base, transport)
		n.handler = observe(name, accessLog, g.metrics, n)
		g.networks[name] = n
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return g, nil
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// buildPolicy parses the reloadable part of cfg.
func (g *Gateway) buildPolicy(cfg *config.Config) (*policy, error) {
	pol := &policy{
		teams:            map[string]*teamPolicy{},
		anonymousCatalog: cfg.Auth.AnonymousCatalog,
		anonymousRate:    ratelimit.Limit{Rate: cfg.Auth.AnonymousRate.RPS, Burst: cfg.Auth.AnonymousRate.Burst},
		catalogTTL:       cfg.Cache.CatalogTTL,
		latestTTL:        cfg.Cache.LatestTTL,
		negativeTTL:      cfg.Cache.NegativeTTL,
		audit:            cfg.Log.Audit,
		verifier: auth.NewVerifier(auth.VerifierConfig{
			MaxSkew: cfg.Auth.MaxSkew, ReplayProtection: cfg.Auth.ReplayProtection, ReplayGrace: cfg.Auth.ReplayGrace, Now: g.now,
			Shared: g.replayStore, SharedFailed: g.replayStoreFailed,
			// One record for the gateway's life: a reload that changes the
			// checks opens no window for a replay.
			Record: g.replayRecord, ReplayMaxEntries: cfg.Auth.ReplayMaxEntries,
		}),
	}
	teams := make([]auth.Team, 0, len(cfg.Teams))
	for _, t := range cfg.Teams {
		at := auth.Team{Name: t.Name, Networks: t.Networks, Feeds: t.Feeds}
		tp := &teamPolicy{
			rate:     ratelimit.Limit{Rate: t.Rate.RPS, Burst: t.Rate.Burst},
			keyRates: map[string]ratelimit.Limit{},
			daily:    t.DailyQuota,
			creds:    map[string]*credential{},
		}
		for _, k := range t.Keys {
			ak := auth.Key{ID: k.ID}
			for _, s := range k.Secrets() {
				ak.Secrets = append(ak.Secrets, s.Reveal())
			}
			at.Keys = append(at.Keys, ak)
			if !k.Rate.Unlimited() {
				tp.keyRates[k.ID] = ratelimit.Limit{Rate: k.Rate.RPS, Burst: k.Rate.Burst}
			}
		}
		for net, c := range t.Upstream {
			if c != nil && c.APIKey != "" {
				tp.creds[net] = &credential{scope: t.Name, key: c.APIKey, secret: []byte(c.Secret().Reveal())}
			}
		}
		teams = append(teams, at)
		pol.teams[t.Name] = tp
	}
	ks, err := auth.NewKeyStore(teams)
	if err != nil {
		return nil, err
	}
	pol.keys = ks
	return pol, nil
}

// Reload applies the teams, keys, limits and lifetimes of cfg. Listeners,
// networks and upstreams are fixed at start and not changed by a reload;
// telling the operator so is the caller's business. An invalid cfg is
// refused, and the configuration in force stays.
func (g *Gateway) Reload(cfg *config.Config) error {
	pol, err := g.buildPolicy(cfg)
	if err != nil {
		return err
	}
	g.pol.Store(pol)
	return nil
}

func (g *Gateway) policy() *policy { return g.pol.Load() }

// Handler returns the handler of one network, or nil.
func (g *Gateway) Handler(name string) http.Handler {
	if n, ok := g.networks[name]; ok {
		return n.handler
	}
	return nil
}

// Listener is one address to listen on and what it serves.
type Listener struct {
	Addr     string   // the configured listen address
	Networks []string // the networks served there, sorted
	Handler  http.Handler
}

// Listeners returns the listeners to open, sorted by address. Networks that
// share a listen address share a listener, where requests are routed by
// their Host name; a network on port 0 (any free port) has a listener of
// its own, since a free port is never shared.
func (g *Gateway) Listeners() []Listener {
	var out []Listener
	byAddr := map[string][]string{}
	for _, name := range g.Networks() {
		addr := g.networks[name].listen
		if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
			out = append(out, Listener{Addr: addr, Networks: []string{name}, Handler: g.networks[name].handler})
			continue
		}
		byAddr[addr] = append(byAddr[addr], name)
	}
	for addr, names := range byAddr {
		l := Listener{Addr: addr, Networks: names, Handler: g.networks[names[0]].handler}
		if len(names) > 1 {
			hosts := map[string]http.Handler{}
			for _, name := range names {
				for _, h := range g.networks[name].hosts {
					hosts[strings.ToLower(h)] = g.networks[name].handler
				}
			}
			l.Handler = hostRouter(hosts, g.unknownHost)
		}
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// hostRouter routes by the request's Host name, port removed.
func hostRouter(hosts map[string]http.Handler, unknown http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if h, ok := hosts[strings.ToLower(host)]; ok {
			h.ServeHTTP(w, r)
			return
		}
		unknown.ServeHTTP(w, r)
	})
}

// Networks returns the names of the networks, sorted.
func (g *Gateway) Networks() []string {
	names := make([]string, 0, len(g.networks))
	for name := range g.networks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Ready reports whether every network's upstream has answered at least once.
func (g *Gateway) Ready() bool {
	for _, n := range g.networks {
		if !n.up.answered.Load() {
			return false
		}
	}
	return true
}

// Warm loads the catalog of every network (which also tells whether its
// upstream answers, and so makes Ready true), trying a network whose
// upstream fails again with backoff (250 ms doubling to 30 s, with jitter)
// until it succeeds or ctx ends. It logs a network's first failure and its
// recovery, and returns nil once every network is warm, else ctx's error.
func (g *Gateway) Warm(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, name := range g.Networks() {
		n := g.networks[name]
		wg.Go(func() {
			for attempt := 0; ; attempt++ {
				_, _, err := n.view(ctx, viewHidden, n.org)
				if err == nil {
					if attempt > 0 {
						g.log.Info("catalog warm-up succeeded", zap.String("network", n.name), zap.Int("attempts", attempt+1))
					}
					return
				}
				if attempt == 0 {
					g.log.Warn("catalog warm-up failed; trying again in the background until the upstream answers",
						zap.String("network", n.name), zap.Error(err))
				}
				d := min(250*time.Millisecond<<min(attempt, 7), 30*time.Second)
				t := time.NewTimer(d/2 + rand.N(d/2))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}

// credentialFor returns the credential that team's calls on n are signed
// with: its own, if configured, else the organisation's.
func (n *network) credentialFor(team string) *credential {
	if tp := n.g.policy().teams[team]; tp != nil {
		if c := tp.creds[n.name]; c != nil {
			return c
		}
	}
	return n.org
}

// ServeHTTP routes one request of the network: the target, method and body
// checks, authentication, quotas, then the endpoint. Nothing reaches the
// upstream that was not matched, validated and entitled here.
func (n *network) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := checkTarget(r); err != nil {
		refuseBody(w, r)
		writeError(w, err)
		return
	}
	rt := routeByPath[r.URL.Path]
	if rt == nil && n.passPaths[r.URL.Path] {
		rt = passThroughRoute
	}
	if rt == nil {
		refuseBody(w, r)
		writeError(w, errNotFound)
		return
	}
	// The API is read-only: GET everywhere, HEAD where the upstream answers
	// it (origin discovery on the root, listed pass-through paths).
	if r.Method != http.MethodGet && !(r.Method == http.MethodHead && rt.allow != "GET") {
		refuseBody(w, r)
		w.Header().Set("Allow", rt.allow)
		writeError(w, errMethod)
		return
	}
	if hasBody(r) {
		refuseBody(w, r)
		writeError(w, errBody)
		return
	}

	pol := n.g.policy()
	st := stateOf(r.Context())
	var p *auth.Principal
	if rt.anonymous && pol.anonymousCatalog && !auth.HasCredentials(r.Header) {
		if err := n.g.admitAnonymous(r.Context(), w, r, pol); err != nil {
			writeError(w, err)
			return
		}
	} else {
		// Check the signature and look at the replay record, admit (the
		// quotas), and only then record the signature: a refused request
		// costs the record nothing.
		res, err := pol.verifier.Check(pol.keys, r)
		if err == nil || errors.Is(err, auth.ErrSkew) || errors.Is(err, auth.ErrReplay) {
			// Only a verified signature's skew is a sample: anyone can
			// send an arbitrary timestamp with a wrong signature.
			n.g.metrics.skew(res.Skew)
		}
		if err != nil {
			st.authError = auth.Reason(err)
			n.g.metrics.authFailure(n.name, st.authError)
			writeError(w, err)
			return
		}
		p = res.Principal
		st.team, st.keyID = p.Team.Name, p.KeyID
		if !p.Team.UsesNetwork(n.name) {
			st.authError = "network"
			n.g.metrics.authFailure(n.name, "network")
			writeError(w, errNetwork)
			return
		}
		if err := n.g.admit(r.Context(), w, pol, p); err != nil {
			writeError(w, err)
			return
		}
		if err := pol.verifier.Record(r.Context(), res); err != nil {
			st.authError = auth.Reason(err)
			n.g.metrics.authFailure(n.name, st.authError)
			writeError(w, err)
			return
		}
	}
	rt.serve(n, w, r, p)
}

// refuseBody makes the server close the connection after an answer given
// without reading a declared body, rather than wait for a body that may
// never come: net/http would otherwise read up to 256 KiB of it after the
// handler returns, until the read timeout.
func refuseBody(w http.ResponseWriter, r *http.Request) {
	if hasBody(r) {
		w.Header().Set("Connection", "close")
		http.NewResponseController(w).SetReadDeadline(time.Now())
	}
}

// admit applies the key's rate, the team's rate and the team's daily quota,
// in that order: a key refused by its own, tighter limit takes nothing from
// its team's rate, so that it cannot starve the team's other keys. Refusals
// are 429 with Retry-After; every decision's state is reported in the
// RateLimit headers.
func (g *Gateway) admit(ctx context.Context, w http.ResponseWriter, pol *policy, p *auth.Principal) error {
	tp := pol.teams[p.Team.Name]
	if tp == nil {
		return nil
	}
	check := func(limit, key string, l ratelimit.Limit) error {
		if l.Unlimited() {
			return nil
		}
		d, err := g.limiter.Allow(ctx, key, l)
		if err != nil {
			return err
		}
		d.SetHeaders(w.Header(), limit)
		if !d.Allowed {
			g.metrics.limited(p.Team.Name, limit)
			return &apiError{status: http.StatusTooManyRequests, msg: "rate limit exceeded for " + limit + ": slow down and retry after the time in Retry-After", retryAfter: d.RetryAfter}
		}
		return nil
	}
	if l, ok := tp.keyRates[p.KeyID]; ok {
		if err := check("key", "key:"+p.KeyID, l); err != nil {
			return err
		}
	}
	if err := check("team", "team:"+p.Team.Name, tp.rate); err != nil {
		return err
	}
	if tp.daily > 0 {
		d, err := g.quota.Take(ctx, "daily:"+p.Team.Name, tp.daily, g.now())
		if err != nil {
			return err
		}
		d.SetHeaders(w.Header(), "daily")
		if !d.Allowed {
			g.metrics.limited(p.Team.Name, "daily")
			return &apiError{status: http.StatusTooManyRequests, msg: "daily quota exhausted for this team", retryAfter: d.RetryAfter}
		}
	}
	return nil
}

// admitAnonymous applies auth.anonymous_rate to an unsigned request, per
// client address (the connection's: a forwarded-for header is the client's
// word and not trusted).
func (g *Gateway) admitAnonymous(ctx context.Context, w http.ResponseWriter, r *http.Request, pol *policy) error {
	if pol.anonymousRate.Unlimited() {
		return nil
	}
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	d, err := g.limiter.Allow(ctx, "anon:"+ip, pol.anonymousRate)
	if err != nil {
		return err
	}
	d.SetHeaders(w.Header(), "address")
	if !d.Allowed {
		g.metrics.limited("anonymous", "address")
		return &apiError{status: http.StatusTooManyRequests, msg: "rate limit exceeded for unsigned catalog requests from this address: slow down, or sign the request", retryAfter: d.RetryAfter}
	}
	return nil
}

// audit writes the audit trail of a read, when enabled: which team and key
// read which streams on which network.
func (n *network) audit(r *http.Request, p *auth.Principal, endpoint string, feeds ...string) {
	if !n.g.policy().audit {
		return
	}
	n.g.auditLog.Info("read",
		zap.String("request_id", stateOf(r.Context()).id),
		zap.String("network", n.name),
		zap.String("team", p.Team.Name),
		zap.String("key_id", p.KeyID),
		zap.String("endpoint", endpoint),
		zap.Strings("feeds", feeds))
}
