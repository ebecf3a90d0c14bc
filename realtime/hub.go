// Package realtime is the hub of one network: it holds few upstream
// WebSocket connections (/api/v1/ws) carrying the union of the feeds its
// consumers want, and fans their report frames out to many internal
// subscriptions. It also keeps, per feed, the newest report, so that REST
// latest can be answered without an upstream call (Latest).
//
// Feeds are wanted by subscriptions, by Config.Pinned and by REST demand
// (Want: DemandThreshold calls within DemandWindow). The wanted set is split
// into chunks of at most Config.FeedsPerConnection feeds, one upstream
// connection per chunk and HA origin, within Config.MaxConnections. A
// changed chunk is switched make-before-break; lost connections are
// reconnected with backoff; a per-feed watermark on observationsTimestamp
// drops the duplicates of HA origins, switches and reconnects.
//
// With Config.Share, the hubs of several replicas share their upstream
// connections through Redis: one replica holds each chunk (a lease) and
// publishes its frames, the others feed them into their hubs as if from
// their own connection (package share).
//
// Four types, one job each, none holding another's owner: Hub, the
// subscriptions, the wanted set and the fan-out (hub.go: its Config and
// life; subscribe.go: Subscribe, admission, release and Drop; wants.go:
// the wanted set and REST demand; frame.go: a frame read once at the
// entry, as a *Frame, and Latest; subscription.go: a consumer's queue);
// continuity, the one owner of "every subscriber gets every second of its
// feeds once, in order": watermarks, the newest reports, the history, gap
// fills and resumes (continuity.go, resume.go, backfill.go); upstream, the connections, their
// plan and the HA origins (manager.go, link.go, plan.go, health.go,
// origins.go, sharing.go); and the sharing with the other replicas, which
// the upstream sees through the interface sharing (four methods,
// sharing.go) and the hub through membership (its start, handover, room
// and stats): with Config.Share a share.Sharer, which runs its own tick,
// else alone{}, so that neither has a branch for a hub that does not
// share. A Subscription is given what it asks of the hub (its
// release, Drop) when made, not the hub.
//
// Config.Clock is the hub's time: it dates the signatures and runs the
// timers of continuity (a gap's gathering, a fill's retries, a resumed
// feed's wait for live frames), so that a test drives them with a fake
// clock. The timers of the connections (grace, demand, stall, ping,
// backoff, share ticks, presence) run on the monotonic wall clock: they
// pace the network, not the reports.
package realtime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/realtime/share"
)

// DefaultStallTimeout is Config.StallTimeout's default. The other sizes
// of Config have no default here: the configuration (package config)
// declares them, and New requires them.
const (
	DefaultStallTimeout = 10 * time.Second
	// MaxFuture is how far ahead of the clock (Config.Clock) a report's
	// observationsTimestamp may lie; a frame dated later is dropped, so
	// that it cannot hold a feed's watermark.
	MaxFuture = 10 * time.Second
)

// REST demand: a feed asked for with Want DemandThreshold times within
// DemandWindow is subscribed, and dropped Grace after the last Want once
// no subscription holds it.
const (
	DemandThreshold = 3
	DemandWindow    = 10 * time.Second
	// maxDemandTracked bounds the feeds whose Want calls are remembered
	// below the threshold.
	maxDemandTracked = 4096
)

// Reconnect backoff: from backoffMin doubling to backoffMax, each wait
// drawn uniformly in [half, whole].
const (
	backoffMin  = 500 * time.Millisecond
	backoffMax  = 30 * time.Second
	dialTimeout = 5 * time.Second
)

// Header names of HA origin discovery.
const (
	headerAvailableOrigins = "X-Cll-Available-Origins"
	headerOrigin           = "X-Cll-Origin"
	wsPath                 = "/api/v1/ws"
)

// Config configures a Hub; see the package documentation.
type Config struct {
	Network string // for logs and metric labels
	// URL is the upstream's WebSocket base, ws:// or wss:// host[:port];
	// any path is dropped and /api/v1/ws appended.
	URL string
	// APIKey and Secret are the organisation's credential: they sign every
	// upgrade and the HEAD / of origin discovery.
	APIKey string
	Secret []byte
	// MaxConnections caps the upstream connections, every origin and chunk
	// together; required (at least 1). A make-before-break switch holds
	// one more per origin for a moment.
	MaxConnections int
	// FeedsPerConnection caps the feeds of one connection; required (at
	// least 1).
	FeedsPerConnection int
	// Grace is how long a feed nobody wants stays subscribed; required
	// (positive).
	Grace time.Duration
	// Pinned are feeds always subscribed; New reads each with
	// feedid.Parse, so that one converted from text in any case is
	// carried under its canonical form, and refuses one that is not a
	// stream ID.
	Pinned []feedid.ID
	// StallTimeout: a connection without frame or pong for this long is
	// replaced; default 10s. The hub pings every StallTimeout/3.
	StallTimeout time.Duration
	// HTTPClient sends HEAD /; nil: a client with a 5 s timeout.
	HTTPClient *http.Client
	Logger     *zap.Logger // nil: nop
	Metrics    *Metrics    // nil: nothing recorded
	// Clock dates the signatures and the reports (MaxFuture) and runs the
	// timers of continuity (see the package documentation); nil: the real
	// clock.
	Clock clockwork.Clock
	// Share, if non-nil, shares the upstream connections with the other
	// replicas of the network through Redis (see package share); nil: the
	// hub holds its own.
	Share *share.Config
	// Check, if non-nil, is asked about each new report (a frame newer
	// than its feed's watermark, from any connection or replica) before it
	// is delivered or kept for Latest; false drops the frame, leaving the
	// watermark where it was, so that a genuine twin of the same second
	// (another HA origin) is still delivered. The gateway verifies the
	// DON's signatures with it.
	Check func(frame []byte) bool
	// Frames, if non-nil, is handed each report the hub delivers for the
	// first time: a frame the watermark and Check let through (live, from
	// any connection or replica), or a second a gap's fill fetched, each
	// (stream, observationsTimestamp) once, in order per stream, after
	// Check. The replays of a resume (seconds below the watermark, for one
	// consumer) are not handed again. The one exception: after Recheck
	// drops a feed's newest report, the genuine report of that second may
	// be handed once more. Frame.Follows says whether the frame is the
	// second after the one handed before it (then the archive may record
	// that it holds every report between them), 0 when continuity cannot
	// vouch for that. It is called with the stream's lock held, on the
	// frame path: it must not block (the archive's Writer.Add queues and
	// returns). Frame.Bytes is shared: never modify it.
	Frames func(Frame)

	// Backfill, if non-nil, is where the hub fetches the seconds a feed's
	// frames skipped (a gap: upstream drop, outage, a holder's crash) and
	// what a returning consumer missed beyond the history
	// (SubscribeOptions.From). nil: gaps stay gaps.
	Backfill BackfillSource
	// DiscoveryBudget, if set, waits for a token of the upstream budget
	// before each origin discovery (HEAD /), so that replicas starting
	// together do not draw the upstream's 429; an error skips that
	// discovery (asked again later, as after a refusal).
	DiscoveryBudget func(ctx context.Context) error
	// BackfillMax bounds the seconds of one gap that are fetched: the
	// newest BackfillMax; the rest are counted unfilled. 0 fetches none.
	BackfillMax time.Duration
	// History is how long each feed keeps the frames it delivered, for
	// a resumed Subscribe (SubscribeOptions.From); 0 keeps none.
	History time.Duration
	// Archive, if non-nil (and Backfill too), is read before the upstream
	// for the seconds a resumed Subscribe needs that the history does not
	// hold (see ArchiveSource); nil: they are fetched with Backfill.
	Archive ArchiveSource
}

// Hub holds a network's upstream WebSocket connections and fans their
// frames out; see the package documentation. Safe for concurrent use.
type Hub struct {
	cfg Config
	log *zap.Logger
	mx  hubMetrics
	st  hubCounters

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards wants, demand, subs and closed, and the refs, pinned,
	// idleSince and demandAt of every feed.
	mu     sync.Mutex
	wants  map[feedid.ID]*feed // every wanted feed (including in grace)
	demand map[feedid.ID]*demandRing
	subs   map[*Subscription]struct{}
	closed bool

	// feeds is the read side of wants for the frame path and Latest:
	// replaced (copy on write) by the holder of mu.
	feeds atomic.Pointer[map[feedid.ID]*feed]

	// up holds the upstream connections and their plan (see upstream);
	// peers shares them with the other replicas (package share): the
	// upstream sees it through the interface sharing, the hub through
	// membership (it starts it, asks it about room and hands over as it
	// closes). Without Config.Share both are alone{}.
	up    *upstream
	peers membership

	// cont owns every second of each feed, once, in order (see
	// continuity): the frame path hands it each frame.
	cont *continuity
}

// feed is one wanted feed: its subscribers, watermark and newest report.
type feed struct {
	id feedid.ID

	// Guarded by Hub.mu.
	refs      int
	pinned    bool
	idleSince time.Time // when refs fell to 0
	demandAt  time.Time // the last Want that counted

	mu   sync.Mutex // guards subs and the ledger; orders deliveries
	subs []*Subscription
	ledger

	latest atomic.Pointer[latest] // written by continuity under mu
}

// latest is a feed's newest report and the connection that delivered it.
type latest struct {
	frame *Frame
	ts    int64
	src   source
}

// source is the connection that delivered a report: valid while it is up
// (a *session of this hub's, or a *share.Session of another replica's).
type source interface{ Valid() bool }

// demandRing holds the times of the last DemandThreshold Want calls.
type demandRing struct {
	t [DemandThreshold]time.Time
	i int
}

type hubCounters struct {
	framesIn, framesOut, duplicates, slowCloses, latestServed atomic.Int64
	reconnDrop, reconnStall, reconnRefused                    atomic.Int64
	backfilled, unfilled, resumed, replayed                   atomic.Int64
}

// New validates cfg, applies the defaults of its optional fields and
// starts the hub's manager.
// No connection is opened until a feed is wanted (at once for Pinned).
func New(cfg Config) (*Hub, error) { return newHub(cfg, nil) }

// newHub is New; join, if non-nil, gives the hub its sharing instead of
// Config.Share (an alternate implementation of the interface sharing: the
// tests' in memory).
func newHub(cfg Config, join func(h *Hub) sharing) (*Hub, error) {
	var errs []error
	u, err := url.Parse(cfg.URL)
	var base, httpURL string
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("realtime: URL: %w", err))
	case u.Host == "" || (u.Scheme != "ws" && u.Scheme != "wss"):
		errs = append(errs, fmt.Errorf("realtime: URL %q: want ws:// or wss:// and a host", cfg.URL))
	default:
		base = u.Scheme + "://" + u.Host
		httpURL = "http" + strings.TrimPrefix(u.Scheme, "ws") + "://" + u.Host + "/"
	}
	if cfg.APIKey == "" || len(cfg.Secret) == 0 {
		errs = append(errs, errors.New("realtime: APIKey and Secret are required"))
	}
	switch {
	case cfg.MaxConnections < 0 || cfg.FeedsPerConnection < 0 || cfg.Grace < 0 || cfg.StallTimeout < 0:
		errs = append(errs, errors.New("realtime: MaxConnections, FeedsPerConnection, Grace and StallTimeout must not be negative"))
	case cfg.MaxConnections == 0 || cfg.FeedsPerConnection == 0 || cfg.Grace == 0:
		errs = append(errs, errors.New("realtime: MaxConnections, FeedsPerConnection and Grace are required"))
	}
	pinned := make([]feedid.ID, 0, len(cfg.Pinned))
	for _, p := range cfg.Pinned {
		id, err := feedid.Parse(string(p))
		if err != nil {
			errs = append(errs, fmt.Errorf("realtime: pinned feed: %w", err))
			continue
		}
		pinned = append(pinned, id)
	}
	cfg.Pinned = pinned
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if cfg.StallTimeout == 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 5 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clockwork.NewRealClock()
	}
	h := &Hub{
		cfg:    cfg,
		log:    cfg.Logger.With(zap.String("network", cfg.Network)),
		wants:  map[feedid.ID]*feed{},
		demand: map[feedid.ID]*demandRing{},
		subs:   map[*Subscription]struct{}{},
		peers:  alone{},
	}
	h.mx = newHubMetrics(cfg.Metrics, cfg.Network, &h.st)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.cont = newContinuity(h.ctx, &h.cfg, h.log, &h.mx)
	if h.cont.bf != nil {
		h.cont.bf.arch = cfg.Archive
	}
	h.up = &upstream{cfg: &h.cfg, base: base, log: h.log, mx: &h.mx, st: &h.st,
		ctx: h.ctx, wg: &h.wg, peers: alone{}, kickCh: make(chan struct{}, 1),
		disc:   &origins{cfg: &h.cfg, httpURL: httpURL, log: h.log, ctx: h.ctx},
		links:  map[*link]struct{}{},
		health: newLinkHealth(h.log),
		wanted: h.wanted, frames: h.deliverFrame}
	switch {
	case join != nil:
		h.up.peers = join(h)
	case cfg.Share != nil:
		sh, err := share.New(*cfg.Share, share.Deps{Network: cfg.Network,
			MaxConnections: cfg.MaxConnections, FeedsPerConnection: cfg.FeedsPerConnection,
			Deliver: func(frame []byte, src *share.Session) { h.deliverFrame(originShared, src, frame) },
			Wanted:  h.local, Budget: h.up.budget, Stepped: h.up.kick,
			Logger: h.log, Metrics: h.mx.m.share})
		if err != nil {
			h.cancel()
			return nil, fmt.Errorf("realtime: %w", err)
		}
		h.peers, h.up.peers = sh, sh
	}
	for _, p := range cfg.Pinned {
		h.want(p).pinned = true
	}
	h.publishFeeds()
	h.peers.Start(h.ctx)
	if h.cont.bf != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.cont.bf.run()
		}()
	}
	h.wg.Add(1)
	go h.up.manage()
	h.up.kick()
	return h, nil
}

// Close closes every upstream connection and every subscription (their Err
// is ErrHubClosed) and waits for the hub's goroutines. A sharing hub first
// hands its chunks over: it lets its leases go and keeps its connections
// until another replica's connection for each chunk delivers, within a
// lease (see share.Sharer.Leave). Idempotent.
func (h *Hub) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.wg.Wait()
		return
	}
	h.closed = true
	subs := h.subs
	h.subs = map[*Subscription]struct{}{}
	h.mu.Unlock()
	h.peers.Leave()
	h.cancel()
	h.wg.Wait()
	h.peers.Wait()
	for s := range subs {
		if s.end(ErrHubClosed) {
			h.mx.subscribers.Add(-1)
		}
	}
}
