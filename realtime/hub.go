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
// subscriptions, the wanted set and the fan-out (hub.go, subscription.go);
// continuity, the one owner of "every subscriber gets every second of its
// feeds once, in order": watermarks, the newest reports, the history, gap
// fills and resumes (continuity.go); upstream, the connections, their
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
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
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
	// be handed once more. It is called with the stream's lock held, on
	// the frame path: it must not block (the archive's Writer.Add queues
	// and returns). Frame.Bytes is shared: never modify it.
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

// SubscribeOptions are how a consumer subscribes (Hub.Subscribe).
type SubscribeOptions struct {
	// Queue is the subscription's queue length, in frames; DefaultQueue
	// when < 1.
	Queue int
	// From, for a consumer that comes back, holds per feed the
	// observationsTimestamp of the last report it received (0 or absent:
	// none, the feed starts as a new consumer's does). Each such feed
	// first gets, in order, every report after that second: from the
	// hub's history, and what the history does not reach fetched with
	// Config.Backfill (the consumer's newer frames of that feed wait
	// meanwhile); then live ones, each once. Empty: a new consumer.
	From map[feedid.ID]int64
	// Within is for a consumer that must get every one of its feeds: the
	// hub refuses (ErrNoRoom, nothing subscribed) when some feed is not
	// carried now and the wanted set, with the feeds not yet wanted, is
	// over what Config.MaxConnections and Config.FeedsPerConnection
	// carry, so that the consumer is told rather than left without
	// frames. A sharing hub counts every replica's wants instead: it
	// refuses when some feed is neither carried by the layout of the
	// union its last tick read nor by a connection of its own, and the
	// union, with this hub's wants not yet in it and the feeds nobody
	// wants yet, is over what the layout can carry
	// (chunkBudget(MaxConnections, origins) × FeedsPerConnection). While
	// sharing is down (Redis), the hub checks its own wants as an
	// unshared hub does. A hub that has not yet connected, or not yet read
	// the union, admits every consumer. No Redis call: the figures are
	// those of the last reconcile and tick.
	Within bool
	// Charge, if not nil, is asked before each second fetched for the
	// consumer's replay (see FillCharge).
	Charge FillCharge
}

// Subscribe registers a consumer of feeds (stream IDs as feedid.Parse
// gives them, without duplicates, entitled by the caller). The hub connects upstream for the
// feeds not yet carried. The newest report the hub holds of each feed, if
// valid (see Latest), comes first (or, for a feed of o.From, the replay of
// what the consumer missed), then every newer report, each once, in
// observationsTimestamp order per feed, as the upstream's bytes. Feeds
// over the connection budget get nothing (Stats.FeedsUncarried) unless
// o.Within refuses them. The error is ErrNoRoom (o.Within only); after
// Close, the subscription is returned already ended with ErrHubClosed.
// Subscription.Replayed tells how many reports it replayed at once.
func (h *Hub) Subscribe(feeds []feedid.ID, o SubscribeOptions) (*Subscription, error) {
	if o.Within && !h.admits(feeds) {
		return nil, ErrNoRoom
	}
	// A consumer admitted between the check and subscribe may take the
	// last room; the window is a few instructions wide.
	from := o.From
	if len(from) == 0 {
		from = nil
	}
	return h.subscribe(feeds, o.Queue, from, o.Charge), nil
}

// subscribe registers s (see Subscribe); charge is the subscription's
// FillCharge (nil: none).
func (h *Hub) subscribe(feeds []feedid.ID, queue int, from map[feedid.ID]int64, charge FillCharge) *Subscription {
	if queue < 1 {
		queue = DefaultQueue
	}
	s := &Subscription{feeds: feeds, ch: make(chan *Frame, queue), done: make(chan struct{}), charge: charge,
		leave: h.release, drop: h.drop}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		s.end(ErrHubClosed)
		s.releaseOnce.Do(func() {})
		return s
	}
	h.subs[s] = struct{}{}
	added := false
	for _, id := range feeds {
		f := h.wants[id]
		if f == nil {
			f = h.want(id)
			added = true
		}
		f.refs++
		f.idleSince = time.Time{}
	}
	if added {
		h.publishFeeds()
	}
	h.mx.subscribers.Add(1)
	// Under h.mu, so that a release cannot interleave; the feed locks
	// order the newest report (or a returning consumer's replay) before
	// every newer frame.
	var overflow bool
	replayed := 0
	for _, id := range feeds {
		f := h.wants[id]
		f.mu.Lock()
		if mark := from[id]; mark > 0 {
			frames := h.cont.resume(s, f, mark)
			f.subs = append(f.subs, s)
			if n, ok := s.deliver(id, frames); !ok {
				overflow = true
			} else {
				replayed += n
			}
		} else {
			f.subs = append(f.subs, s)
			// While a gap is filled, the newest report is among the frames
			// held, which every subscriber gets when it is filled.
			if l := f.latest.Load(); l != nil && l.src.Valid() && f.filling == 0 {
				if sent, o := s.send(l.frame); sent {
					h.mx.delivered(1)
				} else if o {
					overflow = true
				}
			}
		}
		f.mu.Unlock()
	}
	h.mu.Unlock()
	s.replayed = replayed
	if from != nil {
		h.mx.resumed()
		h.mx.replayed(replayed)
		h.mx.delivered(replayed)
	}
	if overflow {
		h.mx.slowClose()
		s.release()
	}
	if added {
		h.up.kick()
	}
	return s
}

// ErrNoRoom is the error of Subscribe with SubscribeOptions.Within when
// the upstream connection budget cannot carry the feeds asked for.
var ErrNoRoom = errors.New("realtime: the upstream connection budget is full")

// admits reports whether the budget has room for feeds (see
// SubscribeOptions.Within).
func (h *Hub) admits(feeds []feedid.ID) bool {
	if h.peers.Sharing() {
		return h.roomShared(feeds, h.peers.Union())
	}
	capacity := h.up.capacity.Load()
	carried := h.up.carried.Load()
	if capacity == 0 || carried == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	fresh, all := 0, true
	for _, id := range feeds {
		if !(*carried)[string(id)] {
			all = false
		}
		if h.wants[id] == nil {
			fresh++
		}
	}
	return all || int64(len(h.wants)+fresh) <= capacity
}

// roomShared reports whether the union u of a sharing hub's last tick has
// room for feeds (see SubscribeOptions.Within); nil u or capacity 0: room. Another
// replica's consumer admitted since that tick may take the last room: the
// window is a tick wide.
func (h *Hub) roomShared(feeds []feedid.ID, u *share.Union) bool {
	if u == nil || u.Capacity == 0 {
		return true
	}
	var own map[string]bool
	if c := h.up.carried.Load(); c != nil {
		own = *c
	}
	all := true
	for _, id := range feeds {
		if !u.Feeds[string(id)] && !own[string(id)] {
			all = false
			break
		}
	}
	if all {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	size := len(u.Feeds)
	for _, id := range feeds {
		if _, in := u.Feeds[string(id)]; !in && h.wants[id] == nil {
			size++
		}
	}
	if size > u.Capacity {
		return false
	}
	// This hub's wants the tick has not published yet (a consumer just
	// admitted here) count too.
	for id := range h.wants {
		if _, in := u.Feeds[string(id)]; !in {
			if size++; size > u.Capacity {
				return false
			}
		}
	}
	return true
}

// want returns the new feed entry of id. Called with h.mu held; the caller
// publishes.
func (h *Hub) want(id feedid.ID) *feed {
	f := h.wants[id]
	if f == nil {
		f = &feed{id: id}
		h.wants[id] = f
	}
	return f
}

// publishFeeds makes the wanted set visible to the frame path. Called with
// h.mu held.
func (h *Hub) publishFeeds() {
	m := make(map[feedid.ID]*feed, len(h.wants))
	for id, f := range h.wants {
		m[id] = f
	}
	h.feeds.Store(&m)
}

// release removes s from its feeds; the feeds nobody wants any more start
// their grace.
func (h *Hub) release(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; !ok {
		return // the hub closed
	}
	delete(h.subs, s)
	h.mx.subscribers.Add(-1)
	now := time.Now()
	for _, id := range s.feeds {
		h.unwant(s, id, now)
	}
}

// drop stops feeds for s (Subscription.Drop).
func (h *Hub) drop(s *Subscription, feeds []feedid.ID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	drop := make(map[feedid.ID]bool, len(feeds))
	for _, id := range feeds {
		if slices.Contains(s.feeds, id) {
			drop[id] = true
		}
	}
	if len(drop) == 0 {
		return len(s.feeds)
	}
	// The caller's slice is shared: build a new one.
	kept := make([]feedid.ID, 0, len(s.feeds))
	for _, id := range s.feeds {
		if !drop[id] {
			kept = append(kept, id)
		}
	}
	old := map[feedid.ID]bool{}
	if d := s.dropped.Load(); d != nil {
		maps.Copy(old, *d)
	}
	maps.Copy(old, drop)
	s.dropped.Store(&old)
	if _, ok := h.subs[s]; ok {
		now := time.Now()
		for id := range drop {
			h.unwant(s, id, now)
		}
	}
	s.feeds = kept
	return len(kept)
}

// unwant removes s from feed id's subscribers; a feed nobody wants any more
// starts its grace at now. h.mu is held.
func (h *Hub) unwant(s *Subscription, id feedid.ID, now time.Time) {
	f := h.wants[id]
	if f == nil {
		return
	}
	f.mu.Lock()
	if i := slices.Index(f.subs, s); i >= 0 {
		last := len(f.subs) - 1
		f.subs[i] = f.subs[last]
		f.subs[last] = nil
		f.subs = f.subs[:last]
	}
	f.mu.Unlock()
	if f.refs--; f.refs == 0 {
		f.idleSince = now
	}
}

// originShared marks the frames received from another replica in logs.
const originShared = "shared"

// deliverFrame hands one frame, delivered by src, to the subscribers of
// its feed, if the feed's continuity takes it (see continuity.take).
func (h *Hub) deliverFrame(origin string, src source, b []byte) {
	frame, ok := readFrame(b)
	if !ok {
		h.log.Warn("upstream frame without feedID or observationsTimestamp", zap.String("origin", origin), zap.Int("bytes", len(b)))
		return
	}
	ts := frame.ObservationsTimestamp
	if h.cont.future(ts, origin) {
		return
	}
	f := (*h.feeds.Load())[frame.Stream]
	if f == nil {
		return // no longer wanted
	}
	f.mu.Lock()
	if !h.cont.take(f, frame, src) {
		f.mu.Unlock()
		return
	}
	n, slow := f.fanOut([]histFrame{{ts, frame}})
	f.mu.Unlock()
	h.mx.fannedOut(n, slow)
}

// Latest returns the newest report frame the hub holds for feed (the
// upstream's bytes: exactly the JSON {"report":{...}} that REST latest
// answers) and its observationsTimestamp, only while the upstream
// connection that delivered it has stayed up since (or was replaced
// make-before-break by one that is still up); ok is false otherwise, and
// when feed is not streamed. Lock-free; each answer with ok true is
// counted (streamgate_ws_latest_served_total).
func (h *Hub) Latest(feed feedid.ID) (frame []byte, observationsTimestamp int64, ok bool) {
	return h.LatestSince(feed, math.MinInt64)
}

// LatestSince is Latest, but ok is false too when the newest report held
// was observed before oldest (Unix seconds): while the connection is up but
// silent (a stall not yet detected), a caller bounds how old a report it
// answers.
func (h *Hub) LatestSince(feed feedid.ID, oldest int64) (frame []byte, observationsTimestamp int64, ok bool) {
	f := (*h.feeds.Load())[feed]
	if f == nil {
		return nil, 0, false
	}
	l := f.latest.Load()
	if l == nil || !l.src.Valid() || l.ts < oldest {
		return nil, 0, false
	}
	h.st.latestServed.Add(1)
	h.mx.latestServed.Inc()
	return l.frame.Bytes, l.ts, true
}

// Want records REST demand for feed: a latest request the hub could not
// answer. DemandThreshold calls within DemandWindow subscribe the feed; it
// is dropped Grace after the last call once no subscription holds it.
// Malformed feed IDs are ignored.
func (h *Hub) Want(feed feedid.ID) {
	if !validFeedID(feed) {
		return
	}
	now := time.Now()
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	if f := h.wants[feed]; f != nil {
		f.demandAt = now
		h.mu.Unlock()
		return
	}
	r := h.demand[feed]
	if r == nil {
		if len(h.demand) >= maxDemandTracked {
			h.pruneDemand(now)
		}
		r = &demandRing{}
		h.demand[feed] = r
	}
	r.t[r.i] = now
	r.i = (r.i + 1) % DemandThreshold
	oldest := r.t[r.i] // the DemandThreshold-th last call
	if oldest.IsZero() || now.Sub(oldest) > DemandWindow {
		h.mu.Unlock()
		return
	}
	delete(h.demand, feed)
	f := h.want(feed)
	f.demandAt = now
	f.idleSince = now
	h.publishFeeds()
	h.mu.Unlock()
	h.up.kick()
}

// pruneDemand forgets the demand older than DemandWindow, or all of it when
// none is. Called with h.mu held.
func (h *Hub) pruneDemand(now time.Time) {
	for id, r := range h.demand {
		newest := r.t[(r.i+DemandThreshold-1)%DemandThreshold]
		if now.Sub(newest) > DemandWindow {
			delete(h.demand, id)
		}
	}
	if len(h.demand) >= maxDemandTracked {
		clear(h.demand)
	}
}

// wanted drops the feeds past their grace (nobody subscribed, not pinned,
// no REST demand within Grace) and returns those wanted: what the
// upstream's reconcile carries.
func (h *Hub) wanted(now time.Time) map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	dropped := false
	for id, f := range h.wants {
		if f.refs > 0 || f.pinned || now.Sub(f.idleSince) < h.cfg.Grace ||
			(!f.demandAt.IsZero() && now.Sub(f.demandAt) < h.cfg.Grace) {
			continue
		}
		delete(h.wants, id)
		dropped = true
	}
	if dropped {
		h.publishFeeds()
	}
	desired := make(map[string]bool, len(h.wants))
	for id := range h.wants {
		desired[string(id)] = true
	}
	return desired
}

// local returns the feeds wanted now (grace included): what a share tick
// publishes.
func (h *Hub) local() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	local := make([]string, 0, len(h.wants))
	for id := range h.wants {
		local = append(local, string(id))
	}
	return local
}

// kick asks the manager to reconcile.
func (u *upstream) kick() {
	select {
	case u.kickCh <- struct{}{}:
	default:
	}
}

// backoff returns the wait before reconnect attempt n (0 first).
func backoff(n int) time.Duration {
	d := backoffMax
	if n < 16 {
		d = min(backoffMin<<n, backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}
