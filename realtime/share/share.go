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
