// Package share shares one network's upstream WebSocket connections
// between the replicas of a gateway through Redis: the replicas agree on
// who holds which chunk of the feeds they want together (a lease), the
// holder publishes the frames its connections read, and the others hand
// them to their hub as if they came from a connection of their own (see
// Config for the protocol). A Sharer knows nothing of the hub: it is given
// at New the hub's network and sizes, and a function that takes the
// frames the other replicas relay (Deps.Deliver); the hub's manager asks
// it every tick what to hold (Step, Plan) and hands it the frames and
// heartbeats of the chunks it holds (Publish, Heartbeat, SessionDown).
package share

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"hash/fnv"
	"net"
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
	Logger  *zap.Logger // nil: nop
	Metrics *Metrics    // nil: nothing recorded
}

// Session is one upstream connection of another replica's chunk, as this
// replica hears of it: valid until its holder says it ended, its
// heartbeats stop naming it, or the holder goes silent.
type Session struct{ up atomic.Bool }

// Valid reports whether the connection is up, as far as this replica
// heard.
func (s *Session) Valid() bool { return s.up.Load() }

func newSession() *Session {
	s := &Session{}
	s.up.Store(true)
	return s
}

// Sharer is the sharing side of one hub: see the package documentation.
// Step, Plan, Holds, Holding, Handover and Release belong to the hub's
// manager goroutine; the others are safe for concurrent use.
type Sharer struct {
	network string
	perConn int // FeedsPerConnection
	maxConn int // MaxConnections
	deliver func(frame []byte, src *Session)
	log     *zap.Logger
	mx      shareMetrics
	ctx     context.Context // from Start: ends the goroutines and calls
	wg      sync.WaitGroup

	c       redis.UniversalClient
	id      string
	lease   time.Duration
	tick    time.Duration
	kWants  string
	kLease  string // + chunk index
	kBase   string // <prefix>{<network>}:
	kAlive  string // presence: replica → expiry (ms, Redis's clock)
	kKnown  string // replicas seen within knownTTL
	channel string

	// The receiver's check of its subscription: the presence message the
	// publisher sent last that the receiver has not heard back (Unix ns,
	// 0 none), and how many times it subscribed again.
	echoSent atomic.Int64
	resubs   atomic.Int64

	stepNow chan struct{} // a tick at once: a dead holder's lease was freed
	leftA   atomic.Bool   // left, for the presence goroutine
	reaped  atomic.Int64  // leases of dead holders freed
	reaping atomic.Bool   // the presence may free leases (see reapAfter)

	// Owned by the manager goroutine.
	ok        bool             // sharing: the last ticks succeeded
	lastOK    time.Time        // the last tick that succeeded
	ticked    bool             // a tick has run
	layout    layout           // of the last successful tick
	held      map[string]bool  // chunk tags whose lease this replica holds
	uncovered map[string]int64 // feed → when it was first seen without a live source (ns since start)
	start     time.Time

	pub     chan []byte
	leaving chan chan struct{} // Close asks the manager to hand over
	left    bool               // handed over: take no lease again (manager)

	mu     sync.Mutex // guards remote
	remote map[string]*remoteChunk

	shared atomic.Bool  // mirrors ok, for Stats
	holds  atomic.Int64 // len(held), for Stats
	// room is the union of the last successful tick (Union); nil while
	// not sharing.
	room atomic.Pointer[Union]

	published, received, fallbacks atomic.Int64
}

// Union is the union of every replica's wants as the last successful
// tick read it, and how many feeds its layout can carry.
type Union struct {
	Feeds    map[string]bool // every feed of the union: true if its layout carries it
	Capacity int             // maxChunks × FeedsPerConnection
}

// remoteChunk is what a replica has heard from another chunk's holder.
type remoteChunk struct {
	seen   time.Time
	holder string
	digest uint64
	sess   map[string]*Session // by holder and session number
}

// layout is the union of the wants split into chunks.
type layout struct {
	n      int
	chunks [][]string // sorted, at most FeedsPerConnection each
	over   int        // feeds over FeedsPerConnection in their chunk
	slot   map[string]int
	digest []uint64
}

func tag(n, i int) string { return strconv.Itoa(n) + "/" + strconv.Itoa(i) }

// chunkOf returns the chunk index of feed among n.
func chunkOf(feed string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(feed))
	return int(h.Sum64() % uint64(n))
}

func digest(feeds []string) uint64 {
	h := fnv.New64a()
	for _, f := range feeds {
		h.Write([]byte(f))
		h.Write([]byte{','})
	}
	return h.Sum64()
}

// newLayout splits union (sorted) into n chunks.
func newLayout(union []string, maxChunks, perConn int) layout {
	l := layout{slot: map[string]int{}}
	if len(union) == 0 || maxChunks < 1 {
		return l
	}
	l.n = min(maxChunks, (len(union)+perConn-1)/perConn)
	l.chunks = make([][]string, l.n)
	var spill []string
	for _, f := range union {
		i := chunkOf(f, l.n)
		if len(l.chunks[i]) >= perConn {
			spill = append(spill, f)
			continue
		}
		l.chunks[i] = append(l.chunks[i], f)
		l.slot[f] = i
	}
	// A chunk's hash share over FeedsPerConnection goes to the next
	// chunks with room, in order: the same union, the same layout.
	for _, f := range spill {
		i := chunkOf(f, l.n)
		placed := false
		for k := 1; k < l.n && !placed; k++ {
			j := (i + k) % l.n
			if len(l.chunks[j]) < perConn {
				l.chunks[j] = append(l.chunks[j], f)
				l.slot[f] = j
				placed = true
			}
		}
		if !placed {
			l.over++
		}
	}
	for _, c := range l.chunks {
		slices.Sort(c)
		l.digest = append(l.digest, digest(c))
	}
	return l
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
	if deps.Deliver == nil || deps.FeedsPerConnection < 1 || deps.MaxConnections < 1 {
		return nil, errors.New("share: Deps.Deliver, MaxConnections and FeedsPerConnection are required")
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
	return &Sharer{
		network: deps.Network, perConn: deps.FeedsPerConnection, maxConn: deps.MaxConnections,
		deliver: deps.Deliver, log: deps.Logger, mx: newShareMetrics(deps.Metrics, deps.Network),
		ctx: context.Background(), c: cfg.Client, id: id, lease: cfg.Lease, tick: cfg.Lease / 3,
		kWants: base + "wants", kLease: base + "lease:", kBase: base, channel: base + "frames",
		kAlive: base + "alive", kKnown: base + "known",
		stepNow: make(chan struct{}, 1),
		held:    map[string]bool{}, uncovered: map[string]int64{}, start: time.Now(),
		pub: make(chan []byte, publishQueue), remote: map[string]*remoteChunk{},
		leaving: make(chan chan struct{}),
	}, nil
}

// Leave asks the manager to hand the chunks held over (it calls Handover
// when Leaving delivers), and waits for it (at most a lease and a
// second). The hub calls it as it closes.
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

// takenOver reports whether each chunk of tags has a holder other than
// this replica with a connection up, heard from since.
func (s *Sharer) takenOver(tags []string, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range tags {
		rc := s.remote[t]
		if rc == nil || !rc.seen.After(since) || len(rc.sess) == 0 {
			return false
		}
	}
	return true
}

// Start starts the publisher, the receiver and the presence; they stop
// when ctx ends (Wait waits for them). Step and Handover use ctx too.
func (s *Sharer) Start(ctx context.Context) {
	s.ctx = ctx
	s.wg.Add(3)
	go s.publisher()
	go s.receiver()
	go s.presence()
}

// Wait waits for the goroutines of Start, once its ctx has ended.
func (s *Sharer) Wait() { s.wg.Wait() }

// Leaving delivers a request of Leave to the manager, which calls
// Handover and then closes the channel it got.
func (s *Sharer) Leaving() <-chan chan struct{} { return s.leaving }

// StepNow delivers when a tick is due at once (a dead holder's lease was
// freed).
func (s *Sharer) StepNow() <-chan struct{} { return s.stepNow }

// Tick is how often the manager calls Step: Lease/3.
func (s *Sharer) Tick() time.Duration { return s.tick }

// Left reports whether the replica has handed its chunks over (Handover):
// it takes no lease again, and its connections stay as they are.
func (s *Sharer) Left() bool { return s.left }

// Sharing reports whether the replica shares now: its last ticks
// succeeded.
func (s *Sharer) Sharing() bool { return s.shared.Load() }

// Holds reports whether this replica holds chunk t's lease. Manager.
func (s *Sharer) Holds(t string) bool { return s.held[t] }

// Holding returns how many chunks this replica holds. Manager.
func (s *Sharer) Holding() int { return len(s.held) }

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

// Stats returns a snapshot.
func (s *Sharer) Stats() Stats {
	st := Stats{Replica: s.id, Sharing: s.shared.Load(), Held: int(s.holds.Load()),
		Published: s.published.Load(), Received: s.received.Load(), Fallbacks: s.fallbacks.Load(),
		Reaped: s.reaped.Load(), Reaping: s.reaping.Load(), Resubscribed: s.resubs.Load()}
	if u := s.room.Load(); u != nil {
		st.Union, st.UnionCapacity = len(u.Feeds), u.Capacity
	}
	return st
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

// Step publishes this replica's wants (local), reads the union, lays it
// out, and renews and takes the leases. maxChunks is how many chunks the
// hub's budget allows, 0 while the hub does not know yet: then budget is
// asked, if the union is not empty (it may discover the origins). Called by the manager goroutine every tick. The
// replica stops sharing when ticks have failed for half a lease (or the
// first one fails), and shares again at the first that succeeds. It
// returns, when the tick succeeded (ok), how many feeds of the union its
// layout leaves over FeedsPerConnection.
func (s *Sharer) Step(local []string, maxChunks int, budget func() int) (over int, ok bool) {
	defer func() { s.holds.Store(int64(len(s.held))) }()
	if s.left {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.lease)
	defer cancel()
	over, err := s.exchange(ctx, local, maxChunks, budget)
	if s.ctx.Err() != nil {
		return 0, false
	}
	first := !s.ticked
	s.ticked = true
	now := time.Now()
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
	return over, err == nil
}

// exchange is one tick's Redis calls.
func (s *Sharer) exchange(ctx context.Context, local []string, maxChunks int, budget func() int) (int, error) {
	args := make([]any, 0, 2+len(local))
	args = append(args, s.lease.Milliseconds(), maxUnion)
	for _, f := range local {
		args = append(args, f)
	}
	union, err := wantsScript.Run(ctx, s.c, []string{s.kWants}, args...).StringSlice()
	if err != nil {
		return 0, err
	}
	slices.Sort(union)
	if len(union) > 0 && maxChunks == 0 {
		maxChunks = budget()
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
		return 0, err
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
	s.held, s.layout = held, lay
	s.room.Store(room)
	return lay.over, nil
}

func splitTag(t string) (i, n int) {
	a, b, _ := strings.Cut(t, "/")
	n, _ = strconv.Atoi(a)
	i, _ = strconv.Atoi(b)
	return i, n
}

// Heartbeat queues the heartbeat of held chunk t: its feeds' digest and
// the numbers of its upstream sessions that are up.
func (s *Sharer) Heartbeat(t string, feeds []string, up []uint64) {
	var b bytes.Buffer
	b.WriteString("sg1 H " + t + " " + s.id + " " + strconv.FormatUint(digest(feeds), 16) + " ")
	for i, id := range up {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(id, 10))
	}
	b.WriteByte('\n')
	s.queue(b.Bytes())
}

// SessionDown queues, at once, the end of upstream session sess of held
// chunk t: the followers stop answering Latest from its reports without
// waiting for the next heartbeat.
func (s *Sharer) SessionDown(t string, sess uint64) {
	s.queue([]byte("sg1 D " + t + " " + s.id + " " + strconv.FormatUint(sess, 10) + "\n"))
}

// Publish queues a frame read by upstream session sess of held chunk t.
func (s *Sharer) Publish(t string, sess uint64, frame []byte) {
	hdr := "sg1 F " + t + " " + s.id + " " + strconv.FormatUint(sess, 10) + "\n"
	m := make([]byte, 0, len(hdr)+len(frame))
	m = append(append(m, hdr...), frame...)
	s.queue(m)
}

func (s *Sharer) queue(m []byte) {
	select {
	case s.pub <- m:
	default:
		s.mx.publishFailed(1)
	}
}

// publisher sends the queued messages, in order, in pipelines.
func (s *Sharer) publisher() {
	defer s.wg.Done()
	batch := make([][]byte, 0, publishBatch)
	for {
		select {
		case <-s.ctx.Done():
			return
		case m := <-s.pub:
			batch = append(batch[:0], m)
		}
	more:
		for len(batch) < publishBatch {
			select {
			case m := <-s.pub:
				batch = append(batch, m)
			default:
				break more
			}
		}
		pipe := s.c.Pipeline()
		frames, echo := 0, false
		for _, m := range batch {
			pipe.SPublish(s.ctx, s.channel, m)
			switch m[4] {
			case 'F':
				frames++
			case 'P':
				echo = true
			}
		}
		// The presence message is awaited from before it is sent: the
		// receiver may hear it before Exec returns.
		sent := time.Now().UnixNano()
		awaited := echo && s.echoSent.CompareAndSwap(0, sent)
		if _, err := pipe.Exec(s.ctx); err != nil {
			if awaited {
				s.echoSent.CompareAndSwap(sent, 0)
			}
			s.mx.publishFailed(len(batch))
			continue
		}
		s.published.Add(int64(frames))
		s.mx.published(frames)
	}
}

// receiver reads the channel and hands the other replicas' frames to the
// hub; it also lets the remote sessions silent for two ticks die.
//
// The client reconnects the subscription when its connection breaks (on a
// failover, to the new master or the slot's new owner). The receiver
// subscribes afresh when that is not enough: Redis ended the subscription
// (SUNSUBSCRIBE, sent when the channel's slot leaves the node), refused it
// (an error reply, such as MOVED), or the subscription delivers nothing
// any more: this replica's own presence message, published every tick,
// not heard back within two ticks.
func (s *Sharer) receiver() {
	defer s.wg.Done()
	ps := s.subscribe()
	defer func() { ps.Close() }()
	echoWait := max(2*s.tick, minEchoWait)
	logged := false // a resubscription logged since the last message
	for {
		msg, err := ps.ReceiveTimeout(s.ctx, s.tick)
		if s.ctx.Err() != nil {
			return
		}
		now := time.Now()
		s.expire(now)
		again, why := "", ""
		switch m := msg.(type) {
		case *redis.Message:
			logged = false
			s.receive([]byte(m.Payload))
		case *redis.Subscription:
			if m.Kind == "sunsubscribe" || m.Kind == "unsubscribe" {
				again, why = "ended", "Redis ended the subscription"
			}
		}
		var reply redis.Error
		if err != nil && errors.As(err, &reply) {
			again, why = "refused", err.Error()
		}
		if sent := s.echoSent.Load(); again == "" && sent != 0 && now.Sub(time.Unix(0, sent)) > echoWait {
			again, why = "silent", "this replica's presence message not heard back within "+echoWait.String()
		}
		if again != "" {
			ps.Close()
			s.reloadState()
			s.resubs.Add(1)
			s.mx.resubscribed(again)
			if !logged { // once until a message comes through again
				logged = true
				s.log.Warn("stream sharing: subscribing to the channel again", zap.String("reason", again), zap.String("detail", why))
			}
			if !s.pause(min(s.tick, 100*time.Millisecond)) {
				return
			}
			ps = s.subscribe()
			continue
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// The connection broke and the client could not connect
			// again (the node is gone): on a cluster, it asks where the
			// slot is now before the next try.
			s.reloadState()
			if !s.pause(min(s.tick, 100*time.Millisecond)) {
				return
			}
		}
	}
}

// reloadState has a cluster client read the cluster's slots again (at
// most every 200 ms, in the background); other clients need not.
func (s *Sharer) reloadState() {
	if rc, ok := s.c.(interface{ ReloadState(context.Context) }); ok {
		rc.ReloadState(s.ctx)
	}
}

// subscribe opens the subscription to the channel; the presence message
// in flight is not waited for any more.
func (s *Sharer) subscribe() *redis.PubSub {
	s.echoSent.Store(0)
	return s.c.SSubscribe(s.ctx, s.channel)
}

// pause waits d, or until the hub closes (false).
func (s *Sharer) pause(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// silent is how long a remote chunk may stay silent and still count.
func (s *Sharer) silent() time.Duration { return 2*s.tick + s.tick/2 }

// expire ends the remote chunks silent for too long.
func (s *Sharer) expire(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, rc := range s.remote {
		if now.Sub(rc.seen) > s.silent() {
			for _, ss := range rc.sess {
				ss.up.Store(false)
			}
			delete(s.remote, t)
		}
	}
}

// receive handles one message of the channel.
func (s *Sharer) receive(m []byte) {
	line, frame, ok := bytes.Cut(m, []byte{'\n'})
	if !ok || !bytes.HasPrefix(line, []byte("sg1 ")) {
		return
	}
	f := strings.Fields(string(line[4:]))
	if len(f) == 2 && f[0] == "P" {
		if f[1] == s.id {
			s.echoSent.Store(0) // heard: the subscription delivers
		}
		return
	}
	if len(f) < 4 || f[2] == s.id {
		return
	}
	kind, t, holder := f[0], f[1], f[2]
	now := time.Now()
	s.mu.Lock()
	rc := s.remote[t]
	if rc == nil || rc.holder != holder {
		if rc != nil {
			for _, ss := range rc.sess {
				ss.up.Store(false)
			}
		}
		rc = &remoteChunk{holder: holder, sess: map[string]*Session{}}
		s.remote[t] = rc
	}
	rc.seen = now
	switch kind {
	case "F":
		ss := rc.sess[f[3]]
		if ss == nil {
			ss = newSession()
			rc.sess[f[3]] = ss
		}
		s.mu.Unlock()
		s.received.Add(1)
		s.mx.received()
		s.deliver(frame, ss)
		return
	case "D":
		if ss := rc.sess[f[3]]; ss != nil {
			ss.up.Store(false)
			delete(rc.sess, f[3])
		}
	case "H":
		if d, err := strconv.ParseUint(f[3], 16, 64); err == nil {
			rc.digest = d
		}
		up := map[string]bool{}
		if len(f) > 4 {
			for _, id := range strings.Split(f[4], ",") {
				up[id] = true
			}
		}
		for id, ss := range rc.sess {
			if !up[id] {
				ss.up.Store(false)
				delete(rc.sess, id)
			}
		}
		for id := range up {
			if rc.sess[id] == nil {
				rc.sess[id] = newSession()
			}
		}
	}
	s.mu.Unlock()
}

// remoteLive reports whether chunk t of the layout has a holder heard
// from recently, carrying the feeds the layout gives it.
func (s *Sharer) remoteLive(t string, d uint64, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := s.remote[t]
	return rc != nil && rc.digest == d && now.Sub(rc.seen) <= s.silent()
}

// Plan returns, for the manager, the chunks this replica holds (by tag)
// with their feeds, and the wanted feeds (desired) it must carry itself:
// those without a live source for Lease, and those it carries already
// until a source is live. carried reports whether a feed is on a
// connection of the replica's own now; up whether a held chunk has a
// connection up.
func (s *Sharer) Plan(desired map[string]bool, carried func(string) bool, up func(string) bool) (held map[string][]string, own []string) {
	held = map[string][]string{}
	if s.ok {
		for t := range s.held {
			i, _ := splitTag(t)
			held[t] = s.layout.chunks[i]
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
		if !s.ok || !s.ticked || carried(f) || time.Duration(nowNs-since) >= s.lease {
			own = append(own, f)
		}
	}
	for f := range s.uncovered {
		if !desired[f] {
			delete(s.uncovered, f)
		}
	}
	slices.Sort(own)
	return held, own
}

// Release lets every lease of this replica go, when the hub closes
// without a handover. Manager.
func (s *Sharer) Release() {
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
	s.held = map[string]bool{}
}

// Handover lets the leases of the chunks held go and waits, while their
// connections still publish, until another replica's connection for each
// delivers (its frames or heartbeat heard since), within a lease; or
// until a tick and a half shows that no replica took any of them. Then
// the hub may close without a gap for the other replicas' clients. The
// manager calls it when Leaving delivers; the replica takes no lease
// again.
func (s *Sharer) Handover() {
	s.left = true
	s.leftA.Store(true)
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
	s.Release()
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
