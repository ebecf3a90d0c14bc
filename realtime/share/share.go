// Package share shares one network's upstream WebSocket connections
// between the replicas of a gateway through Redis: the replicas agree on
// who holds which chunk of the feeds they want together (a lease), the
// holder publishes the frames its connections read, and the others hand
// them to their hub as if they came from a connection of their own (see
// Config for the protocol). A Sharer knows nothing of the hub: it is given
// at New the hub's network and sizes and a few functions (Deps): the
// feeds the hub wants, its connection budget, a call after each tick,
// and one that takes the frames the other replicas relay. It runs its own
// tick (Start); the hub's upstream asks it what to hold and carry (Plan)
// and hands it what the chunks it holds read and carry (Publish,
// SessionDown, Carrying).
package share

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// DefaultPrefix is Config.Prefix's default; Config.Lease has none here
// (the configuration declares it: realtime.share_lease).
const (
	DefaultPrefix = "streamgate:ws:v2:"
	// minShareLease bounds the tick (Lease/3) from below: each tick costs
	// a few Redis calls.
	minShareLease = 300 * time.Millisecond
	// maxUnion bounds the wanted feeds read back from Redis.
	maxUnion = 10000
	// publishQueue is how many messages may wait for the publisher; more
	// are dropped (and counted).
	publishQueue = 4096
	publishBatch = 128
	// minEchoWait bounds from below how long the receiver waits for its
	// own presence message before it subscribes again (two ticks).
	minEchoWait = 600 * time.Millisecond
)

// Config configures the sharing of a hub's upstream connections with the
// other replicas of the same network through Redis (realtime.Config.Share). The
// replicas agree through Redis on who holds which upstream connection.
// Every key and the channel of a network carry the hash tag {<network>}:
// on Redis Cluster they live in one slot, on one shard, so that each
// script works there, and the channel is a shard channel (SPUBLISH,
// SSUBSCRIBE; Redis 7 takes them on a single node too).
//
//   - Every replica adds the feeds it wants (subscriptions, pinned, REST
//     demand, grace) to the sorted set <prefix>{<network>}:wants, each with
//     an expiry Lease ahead by Redis's clock, every Lease/3 (a tick).
//   - The union of the wants is laid out in n chunks, n = ceil(feeds /
//     FeedsPerConnection) at most the chunks the hub's budget allows: a feed goes to
//     the chunk of its FNV-1a hash mod n (or, that chunk full, to the
//     next one with room), so that a feed added or removed changes one
//     chunk only, as long as n stays.
//   - A chunk is held by the replica whose ID its lease
//     <prefix>{<network>}:lease:<i> holds (SET NX PX Lease, renewed every
//     tick by the holder, deleted by it when it lets go or closes; a
//     crashed holder's lease expires). The holder connects upstream for
//     the chunk, as an unshared hub would, and publishes every frame it
//     reads on the shard channel <prefix>{<network>}:frames, with a
//     heartbeat per chunk every tick.
//   - Every replica reads the channel and feeds the frames of the others
//     into its hub as if they came from its own connection: the watermark
//     drops the duplicates, Latest answers while the holder's heartbeats
//     say the connection that delivered the report is still up.
//   - A feed a replica wants whose chunk has no live source (a held chunk
//     with a connection up, or a holder heard within two and a half ticks,
//     laying out the same feeds) for Lease is carried by a connection of
//     the replica's own, until a source is back. When ticks fail for half
//     a lease (Redis down, slow, or its circuit breaker open), the replica
//     stops sharing: it lets its chunks go and carries every feed it wants
//     itself, within MaxConnections, until a tick succeeds again.
//   - A closing hub hands its chunks over: it deletes its leases and keeps
//     its connections until another replica's connection for each chunk
//     delivers, within a lease.
//   - The subscription follows Redis: the client reconnects it after a
//     failover, and the receiver subscribes again when Redis ends it
//     (SUNSUBSCRIBE when a slot moves), answers it with an error, or when
//     the replica's own presence message, published every tick, is not
//     heard back within two ticks.
//
// A message on the channel is a header line and, for a frame, the
// upstream's bytes unchanged:
//
//	sg1 F <n>/<i> <replica> <session>\n<frame>
//	sg1 H <n>/<i> <replica> <digest> <session>,<session>…\n
//	sg1 D <n>/<i> <replica> <session>\n
//	sg1 P <replica>\n
//
// where <session> numbers one upstream connection of the holder (H lists
// those up; D says one has ended) and <digest> is the FNV-1a hash of the
// chunk's feeds. P is a replica's presence, every tick: it hears its own
// to know its subscription delivers.
type Config struct {
	// Client is the process's Redis client, as made by redisconn.New (a
	// single node, Sentinel or Cluster): every call with a short deadline
	// and a circuit breaker. Required.
	Client redis.UniversalClient
	// Replica names this replica in the leases and messages; "" a random
	// ID. Two replicas must never share one.
	Replica string
	// Lease is how long a chunk's lease lasts unless renewed; ticks are
	// Lease/3 apart. Required: at least 300ms.
	Lease time.Duration
	// Prefix starts every key and channel; default "streamgate:ws:v2:".
	// It must not contain '{' or '}': the hash tag is the network's.
	Prefix string
}

// Roles of a chunk (metric label).
const (
	RoleHolder   = "holder"
	RoleFollower = "follower"
)

// Deps is what a Sharer is given by its hub.
type Deps struct {
	// Network names the network in the keys, logs and metric labels.
	Network string
	// MaxConnections and FeedsPerConnection are the hub's budget: the
	// leases a replica may hold from an earlier layout are looked for up
	// to MaxConnections, and a chunk carries at most FeedsPerConnection.
	MaxConnections, FeedsPerConnection int
	// Deliver takes a frame another replica's connection read; src says
	// while that connection is up. Called by the receiver goroutine.
	Deliver func(frame []byte, src *Session)
	// Wanted returns the feeds this replica wants (subscriptions, pinned,
	// REST demand, grace), published every tick. Budget returns how many
	// chunks the hub's connection budget allows: 0 while the hub does not
	// know its origins yet, unless discover asks it to find them. Stepped
	// is called after every tick, so that the hub plans again (Plan).
	// All three are called by the Sharer's tick goroutine; required.
	Wanted  func() []string
	Budget  func(discover bool) int
	Stepped func()
	Logger  *zap.Logger // nil: nop
	Metrics *Metrics    // nil: nothing recorded
}

// Sharer is the sharing side of one hub: see the package documentation.
// Its tick goroutine (Start) keeps the wants and the leases (step) and
// the handover; the hub's upstream asks it what to hold and what to carry
// alone (Plan) and tells it what the held chunks carry (Carrying); its
// relay keeps the channel (Publish, SessionDown, the heartbeats, the
// receiver) and its presence the reaping of dead holders' leases. Plan
// and Carrying belong to one goroutine (the hub's manager); the others
// are safe for concurrent use.
type Sharer struct {
	*relay
	pres *presence
	deps Deps

	perConn int             // FeedsPerConnection
	maxConn int             // MaxConnections
	ctx     context.Context // from Start: ends the goroutines and calls
	wg      sync.WaitGroup

	lease  time.Duration
	kWants string
	kLease string // + chunk index

	// Written by the tick goroutine under mu, read by Plan and Carrying
	// under mu.
	mu      sync.Mutex
	ok      bool            // sharing: the last ticks succeeded
	lastOK  time.Time       // the last tick that succeeded
	ticked  bool            // a tick has run
	layout  layout          // of the last successful tick
	held    map[string]bool // chunk tags whose lease this replica holds
	over    int             // feeds of the union the last successful tick's layout leaves out
	left    bool            // handed over: take no lease again
	ticks   uint64          // ticks run
	planned uint64          // ticks the last Plan had seen
	beaten  uint64          // ticks whose heartbeats were sent

	// Owned by the goroutine of Plan.
	uncovered map[string]int64 // feed → when it was first seen without a live source (ns since start)
	start     time.Time

	leaving chan chan struct{} // Leave asks the tick goroutine to hand over

	shared atomic.Bool  // mirrors ok, for Stats
	holds  atomic.Int64 // len(held), for Stats
	// room is the union of the last successful tick (Union); nil while
	// not sharing.
	room atomic.Pointer[Union]

	fallbacks atomic.Int64
}

// Union is the union of every replica's wants as the last successful
// tick read it, and how many feeds its layout can carry.
type Union struct {
	Feeds    map[string]bool // every feed of the union: true if its layout carries it
	Capacity int             // maxChunks × FeedsPerConnection
}

// New validates cfg and returns the Sharer of the hub that deps
// describes; Start starts it.
func New(cfg Config, deps Deps) (*Sharer, error) {
	if cfg.Client == nil {
		return nil, errors.New("share: Client is required")
	}
	if cfg.Lease < minShareLease {
		return nil, errors.New("share: Lease must be at least 300ms")
	}
	if deps.Deliver == nil || deps.Wanted == nil || deps.Budget == nil || deps.Stepped == nil ||
		deps.FeedsPerConnection < 1 || deps.MaxConnections < 1 {
		return nil, errors.New("share: Deps.Deliver, Wanted, Budget, Stepped, MaxConnections and FeedsPerConnection are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if deps.Logger == nil {
		deps.Logger = zap.NewNop()
	}
	id := cfg.Replica
	if id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(id, " \n,/") {
		return nil, errors.New("share: Replica must not contain spaces, commas, slashes or newlines")
	}
	if strings.ContainsAny(cfg.Prefix+deps.Network, "{}") {
		return nil, errors.New("share: Prefix and the network must not contain '{' or '}'")
	}
	base := cfg.Prefix + "{" + deps.Network + "}:"
	mx := newShareMetrics(deps.Metrics, deps.Network)
	return &Sharer{
		relay: &relay{c: cfg.Client, id: id, channel: base + "frames", tick: cfg.Lease / 3,
			deliver: deps.Deliver, log: deps.Logger, mx: mx,
			pub: make(chan []byte, publishQueue), remote: map[string]*remoteChunk{}},
		pres:    newPresence(cfg.Client, id, base, deps.MaxConnections, deps.Logger, mx),
		deps:    deps,
		perConn: deps.FeedsPerConnection, maxConn: deps.MaxConnections,
		ctx: context.Background(), lease: cfg.Lease,
		kWants: base + "wants", kLease: base + "lease:",
		held: map[string]bool{}, uncovered: map[string]int64{}, start: time.Now(),
		leaving: make(chan chan struct{}),
	}, nil
}

// Leave asks the tick goroutine to hand the chunks held over (handover),
// and waits for it (at most a lease and a second). The hub calls it as it
// closes; once the handover has begun, Plan keeps the connections as
// they are.
func (s *Sharer) Leave() {
	done := make(chan struct{})
	t := time.NewTimer(s.lease + time.Second)
	defer t.Stop()
	select {
	case s.leaving <- done:
	case <-t.C:
		return
	}
	select {
	case <-done:
	case <-t.C:
	}
}

// Start starts the tick, the publisher, the receiver and the presence;
// they stop when ctx ends (Wait waits for them). A tick's calls use ctx
// too.
func (s *Sharer) Start(ctx context.Context) {
	s.ctx = ctx
	for _, run := range []func(context.Context){s.run, s.publisher, s.receiver, s.pres.run} {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			run(ctx)
		}()
	}
}

// Wait waits for the goroutines of Start, once its ctx has ended.
func (s *Sharer) Wait() { s.wg.Wait() }

// run is the tick goroutine: a tick every Lease/3 and at once when a dead
// holder's lease was freed, each followed by Deps.Stepped; the handover
// when Leave asks; the leases let go when ctx ends without one.
func (s *Sharer) run(ctx context.Context) {
	t := time.NewTicker(s.tick)
	defer t.Stop()
	s.step()
	for {
		select {
		case <-ctx.Done():
			if !s.hasLeft() { // a handover has let them go
				s.release()
			}
			return
		case <-t.C:
			s.step()
		case <-s.pres.stepNow:
			s.step()
		case done := <-s.leaving:
			s.handover()
			close(done)
		}
	}
}

func (s *Sharer) hasLeft() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.left
}

// step runs a tick (tick) with this replica's wants, counts it and tells
// the hub.
func (s *Sharer) step() {
	if s.hasLeft() {
		return
	}
	s.tickOnce(s.deps.Wanted())
	s.mu.Lock()
	s.ticks++
	s.mu.Unlock()
	s.deps.Stepped()
}

// Sharing reports whether the replica shares now: its last ticks
// succeeded.
func (s *Sharer) Sharing() bool { return s.shared.Load() }

// Union returns the union of the last successful tick, for the hub's
// admission; nil while not sharing.
func (s *Sharer) Union() *Union { return s.room.Load() }

// Stats is a Sharer's snapshot (the hub's Stats.Share).
type Stats struct {
	Replica string
	// Sharing is false while Redis fails and the replica holds its own
	// connections for every feed it wants.
	Sharing bool
	// Held is how many chunks this replica holds (their connections are
	// among the hub's).
	Held int
	// Reaped counts the leases of dead holders this replica freed for
	// takeover; Reaping is whether it may free them now (its presence
	// writes have succeeded long enough).
	Reaped  int64
	Reaping bool
	// Resubscribed counts the subscriptions to the channel made again
	// (ended or refused by Redis, or silent).
	Resubscribed        int64
	Published, Received int64 // frames through Redis
	Fallbacks           int64
	// Union is how many feeds every replica wants together, as the last
	// tick read them, and UnionCapacity how many its layout can carry
	// (the hub's admission refuses beyond); both 0 while not sharing.
	Union, UnionCapacity int
}

// Stats returns a snapshot (never nil: a hub that does not share has
// none).
func (s *Sharer) Stats() *Stats {
	st := Stats{Replica: s.id, Sharing: s.shared.Load(), Held: int(s.holds.Load()),
		Published: s.published.Load(), Received: s.received.Load(), Fallbacks: s.fallbacks.Load(),
		Reaped: s.pres.reaped.Load(), Reaping: s.pres.reaping.Load(), Resubscribed: s.resubs.Load()}
	if u := s.room.Load(); u != nil {
		st.Union, st.UnionCapacity = len(u.Feeds), u.Capacity
	}
	return &st
}

// leaseScript renews the leases of chunks 1..n this replica holds, takes
// those free that it asks for (ARGV[3+i] = "1"), and deletes those beyond
// n it holds. It returns 1 per key held after it.
var leaseScript = redis.NewScript(`
local out = {}
local n = tonumber(ARGV[3])
for i, k in ipairs(KEYS) do
  local v = redis.call('GET', k)
  out[i] = 0
  if i <= n and ARGV[3 + i] == '1' then
    if v == ARGV[1] then
      redis.call('PEXPIRE', k, ARGV[2])
      out[i] = 1
    elseif not v then
      if redis.call('SET', k, ARGV[1], 'NX', 'PX', ARGV[2]) then out[i] = 1 end
    end
  elseif v == ARGV[1] then
    redis.call('DEL', k)
  end
end
return out
`)

// wantsScript adds this replica's wants (ARGV[3…]) to the sorted set, each
// expiring ARGV[1] ms from now, drops the expired ones and returns the
// others, at most ARGV[2]. Times are Redis's own (TIME), so that the
// replicas' clocks need not agree.
var wantsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = now + tonumber(ARGV[1])
for i = 3, #ARGV do
  redis.call('ZADD', KEYS[1], exp, ARGV[i])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[1]))
end
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, tonumber(ARGV[2]))
`)

// releaseScript deletes the leases this replica holds among KEYS.
var releaseScript = redis.NewScript(`
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then redis.call('DEL', k) end
end
return 0
`)

// tickOnce publishes this replica's wants (local), reads the union, lays
// it out, and renews and takes the leases, within the budget that
// Deps.Budget gives (asked to discover the origins when the union is not
// empty and they are not known yet). The replica stops sharing when ticks
// have failed for half a lease (or the first one fails), and shares again
// at the first that succeeds. The tick goroutine's; it alone writes the
// fields under mu, so it reads them without.
func (s *Sharer) tickOnce(local []string) {
	defer func() { s.holds.Store(int64(len(s.held))) }()
	ctx, cancel := context.WithTimeout(s.ctx, s.lease)
	defer cancel()
	err := s.exchange(ctx, local, s.deps.Budget(false))
	if s.ctx.Err() != nil {
		return
	}
	first := !s.ticked
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ticked = true
	if err == nil {
		s.lastOK = now
		s.queue([]byte("sg1 P " + s.id + "\n"))
	}
	switch {
	case err != nil && s.ok && now.Sub(s.lastOK) < s.lease/2:
		// One failed tick: the leases held stay valid for a while yet.
		s.log.Debug("stream sharing: a tick failed", zap.Error(err))
	case err != nil && (s.ok || first):
		s.ok = false
		s.shared.Store(false)
		s.mx.mode(false)
		s.fallbacks.Add(1)
		s.mx.fallback()
		for i := range s.layout.n {
			s.mx.chunkRole(tag(s.layout.n, i), "")
		}
		s.held, s.layout = map[string]bool{}, layout{}
		s.room.Store(nil)
		s.log.Warn("stream sharing unavailable: this replica holds its own upstream connections", zap.Error(err))
	case err == nil && (!s.ok || first):
		s.ok = true
		s.shared.Store(true)
		s.mx.mode(true)
		if !first {
			s.log.Info("stream sharing back: upstream connections shared with the other replicas", zap.String("replica", s.id))
		} else {
			s.log.Info("stream sharing", zap.String("replica", s.id))
		}
	}
}

// exchange is one tick's Redis calls; when they succeed, it sets the
// held leases, the layout, the over count and the union.
func (s *Sharer) exchange(ctx context.Context, local []string, maxChunks int) error {
	args := make([]any, 0, 2+len(local))
	args = append(args, s.lease.Milliseconds(), maxUnion)
	for _, f := range local {
		args = append(args, f)
	}
	union, err := wantsScript.Run(ctx, s.c, []string{s.kWants}, args...).StringSlice()
	if err != nil {
		return err
	}
	slices.Sort(union)
	if len(union) > 0 && maxChunks == 0 {
		maxChunks = s.deps.Budget(true)
	}
	lay := newLayout(union, maxChunks, s.perConn)
	room := &Union{Feeds: make(map[string]bool, len(union)), Capacity: maxChunks * s.perConn}
	for _, f := range union {
		_, placed := lay.slot[f]
		room.Feeds[f] = placed
	}

	// Leases: the chunks of the layout, and every other index this
	// replica may hold from an earlier layout, to let it go.
	nKeys := max(lay.n, s.maxConn)
	keys := make([]string, nKeys)
	args = []any{s.id, s.lease.Milliseconds(), lay.n}
	for i := range keys {
		keys[i] = s.kLease + strconv.Itoa(i)
		want := "0"
		if i < lay.n && len(lay.chunks[i]) > 0 {
			want = "1"
		}
		args = append(args, want)
	}
	res, err := leaseScript.Run(ctx, s.c, keys, args...).Int64Slice()
	if err != nil {
		return err
	}
	held := map[string]bool{}
	for i, v := range res {
		if v == 1 && i < lay.n {
			held[tag(lay.n, i)] = true
		}
	}
	for t := range held {
		if !s.held[t] {
			s.mx.lease("acquired")
			s.log.Debug("chunk lease acquired", zap.String("chunk", t))
		}
	}
	for t := range s.held {
		if !held[t] {
			s.mx.chunkRole(t, "")
			if i, n := splitTag(t); n == lay.n && i < n && len(lay.chunks[i]) > 0 {
				s.mx.lease("lost")
				s.log.Warn("chunk lease lost to another replica", zap.String("chunk", t))
			} else {
				s.mx.lease("released")
			}
		}
	}
	for old := range s.layout.n {
		if old >= lay.n || s.layout.n != lay.n {
			s.mx.chunkRole(tag(s.layout.n, old), "")
		}
	}
	for i := range lay.n {
		t := tag(lay.n, i)
		if held[t] {
			s.mx.chunkRole(t, RoleHolder)
		} else {
			s.mx.chunkRole(t, RoleFollower)
		}
	}
	s.mu.Lock()
	s.held, s.layout, s.over = held, lay, lay.over
	s.mu.Unlock()
	s.room.Store(room)
	return nil
}

// Plan is what a replica's upstream connections carry, as Sharer.Plan
// says.
type Plan struct {
	// Keep: leave the connections as they are. Before the first tick
	// (nothing is known yet), and once the replica has handed its chunks
	// over (it is closing).
	Keep bool
	// Held are the shared chunks this replica holds (tag → feeds): it
	// connects for them and publishes what they read.
	Held map[string][]string
	// Own are the wanted feeds this replica carries on connections of its
	// own, within the budget the held chunks leave.
	Own map[string]bool
	// Sharing: the replica shares now (its last ticks succeeded); Over is
	// then how many feeds of every replica's union the layout leaves out.
	Sharing bool
	Over    int
}

// Plan returns, for the hub's upstream, the chunks this replica holds
// with their feeds, and the wanted feeds (desired) it must carry itself:
// those without a live source for Lease, and those it carries already
// until a source is live; every wanted feed while it does not share.
// carried reports whether a feed is on a connection of the replica's own
// now; up whether a held chunk has a connection up.
func (s *Sharer) Plan(desired map[string]bool, carried func(feed string) bool, up func(tag string) bool) Plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.left || !s.ticked {
		return Plan{Keep: true}
	}
	s.planned = s.ticks
	p := Plan{Held: map[string][]string{}, Own: map[string]bool{}, Sharing: s.ok, Over: s.over}
	if s.ok {
		for t := range s.held {
			i, _ := splitTag(t)
			p.Held[t] = s.layout.chunks[i]
		}
	}
	now := time.Now()
	nowNs := int64(now.Sub(s.start))
	for f := range desired {
		if s.ok {
			if i, ok := s.layout.slot[f]; ok {
				t := tag(s.layout.n, i)
				if (s.held[t] && up(t)) || (!s.held[t] && s.remoteLive(t, s.layout.digest[i], now)) {
					delete(s.uncovered, f)
					continue
				}
			}
		}
		since, seen := s.uncovered[f]
		if !seen {
			since = nowNs
			s.uncovered[f] = since
		}
		if !s.ok || carried(f) || time.Duration(nowNs-since) >= s.lease {
			p.Own[f] = true
		}
	}
	for f := range s.uncovered {
		if !desired[f] {
			delete(s.uncovered, f)
		}
	}
	return p
}

// Held is a chunk this replica holds as its connections carry it: its
// feeds and the numbers of its upstream sessions that are up.
type Held struct {
	Tag   string
	Feeds []string
	Up    []uint64
}

// Carrying is told, after each plan the hub's upstream has carried out,
// the chunks it connects for as this replica's holder; after a tick, the
// first such call sends the heartbeat of each chunk still held (its feeds'
// digest and the sessions up). Called by the goroutine of Plan.
func (s *Sharer) Carrying(chunks []Held) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.planned <= s.beaten {
		return
	}
	s.beaten = s.planned
	for _, c := range chunks {
		if s.held[c.Tag] {
			s.heartbeat(c.Tag, c.Feeds, c.Up)
		}
	}
}

// release lets every lease of this replica go, when the hub closes
// without a handover. The tick goroutine's.
func (s *Sharer) release() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	keys := make([]string, max(s.maxConn, s.layout.n))
	for i := range keys {
		keys[i] = s.kLease + strconv.Itoa(i)
	}
	if err := releaseScript.Run(ctx, s.c, keys, s.id).Err(); err != nil && !errors.Is(err, redis.Nil) {
		s.log.Warn("stream sharing: leases not released; they expire", zap.Error(err))
		return
	}
	for range s.held {
		s.mx.lease("released")
	}
	for t := range s.held {
		s.mx.chunkRole(t, "")
	}
	s.mu.Lock()
	s.held = map[string]bool{}
	s.mu.Unlock()
}

// handover lets the leases of the chunks held go and waits, while their
// connections still publish, until another replica's connection for each
// delivers (its frames or heartbeat heard since), within a lease; or
// until a tick and a half shows that no replica took any of them. Then
// the hub may close without a gap for the other replicas' clients. The
// tick goroutine calls it when Leave asks; the replica takes no lease
// again, and Plan keeps the connections as they are.
func (s *Sharer) handover() {
	s.mu.Lock()
	s.left = true
	s.mu.Unlock()
	s.pres.left.Store(true)
	if !s.ok || len(s.held) == 0 {
		return
	}
	var tags, keys []string
	for t := range s.held {
		i, _ := splitTag(t)
		tags = append(tags, t)
		keys = append(keys, s.kLease+strconv.Itoa(i))
	}
	since := time.Now()
	s.release()
	ctx, cancel := context.WithTimeout(context.Background(), s.lease)
	defer cancel()
	tk := time.NewTicker(20 * time.Millisecond)
	defer tk.Stop()
	taken := false
	for {
		if s.takenOver(tags, since) {
			s.log.Info("shared chunks handed over", zap.Strings("chunks", tags))
			return
		}
		if !taken && time.Since(since) > s.tick*3/2 {
			n, err := s.c.Exists(ctx, keys...).Result()
			if err != nil || n == 0 {
				return // nobody wants them, or Redis fails: nothing to wait for
			}
			taken = true
		}
		select {
		case <-ctx.Done():
			s.log.Warn("shared chunks not taken over within a lease: closing", zap.Strings("chunks", tags))
			return
		case <-tk.C:
		}
	}
}
