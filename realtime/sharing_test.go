package realtime

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/realtime/share"
)

// memBoard is an alternate implementation of the interface sharing, in
// memory, for the hubs of one process: a real one, not a mock (the way
// groupcache tests its seams). The first hub to join holds one chunk with
// the union of every member's wants and relays what its connections read
// to the others, each frame with a source valid while the connection
// that read it is up; the others carry nothing themselves.
type memBoard struct {
	mu      sync.Mutex
	members []*memPeer
	sess    map[uint64]*memSession // the holder's sessions heard of
}

type memPeer struct {
	b     *memBoard
	h     *Hub
	wants map[string]bool // guarded by b.mu
	// beats counts the Carrying calls that named the held chunk with a
	// session up.
	beats atomic.Int64
}

type memSession struct{ up atomic.Bool }

func (s *memSession) Valid() bool { return s.up.Load() }

const memTag = "1/0"

// join makes h a member (newHub's join).
func (b *memBoard) join(h *Hub) sharing {
	p := &memPeer{b: b, h: h}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.members = append(b.members, p)
	return p
}

func (p *memPeer) Plan(wanted map[string]bool, _, _ func(string) bool) share.Plan {
	b := p.b
	b.mu.Lock()
	changed := !maps.Equal(p.wants, wanted)
	p.wants = maps.Clone(wanted)
	holder := b.members[0]
	union := map[string]bool{}
	var others []*memPeer
	for _, m := range b.members {
		maps.Copy(union, m.wants)
		if m != p {
			others = append(others, m)
		}
	}
	b.mu.Unlock()
	if changed {
		for _, m := range others {
			m.h.up.kick() // the holder plans the new union
		}
	}
	plan := share.Plan{Held: map[string][]string{}, Own: map[string]bool{}, Sharing: true}
	if p == holder && len(union) > 0 {
		plan.Held[memTag] = slices.Sorted(maps.Keys(union))
	}
	return plan
}

func (p *memPeer) Publish(tag string, sess uint64, frame []byte) {
	b := p.b
	b.mu.Lock()
	if b.sess == nil {
		b.sess = map[uint64]*memSession{}
	}
	src := b.sess[sess]
	if src == nil {
		src = &memSession{}
		src.up.Store(true)
		b.sess[sess] = src
	}
	others := slices.DeleteFunc(slices.Clone(b.members), func(m *memPeer) bool { return m == p })
	b.mu.Unlock()
	for _, m := range others {
		m.h.deliverFrame(originShared, src, frame)
	}
}

func (p *memPeer) SessionDown(tag string, sess uint64) {
	p.b.mu.Lock()
	defer p.b.mu.Unlock()
	if s := p.b.sess[sess]; s != nil {
		s.up.Store(false)
	}
}

func (p *memPeer) Carrying(held []share.Held) {
	for _, c := range held {
		if c.Tag == memTag && len(c.Up) > 0 {
			p.beats.Add(1)
		}
	}
}

// The upstream depends on sharing only: two hubs sharing through an
// in-memory implementation of it (no Redis) hold one upstream connection
// between them, and each subscription gets every report, in order, once.
func TestSharingInMemory(t *testing.T) {
	e := newEnv(t, nil)
	feeds := e.crypto(t, 3)
	board := &memBoard{}
	hubs := make([]*Hub, 2)
	cols := make([]*collector, 2)
	for i := range hubs {
		h, err := newHub(e.config(nil), board.join)
		require.NoError(t, err)
		t.Cleanup(h.Close)
		hubs[i] = h
	}
	for i, h := range hubs {
		cols[i] = collect(t, subscribe(t, h, feeds, SubscribeOptions{}))
	}
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool {
		return e.open() == 1 && hubs[0].Stats().Up() == 1 && len(hubs[1].Stats().Connections) == 0
	}, wait, 10*time.Millisecond, "the holder's one connection carries the union")

	oneConnection(t, e, cols, feeds, 20)
	assert.Positive(t, board.members[0].beats.Load(), "the holder told its sharing what the held chunk carries")
	assert.Zero(t, board.members[1].beats.Load())
	l, _, ok := hubs[1].Latest(feeds[0])
	require.True(t, ok, "the follower answers Latest from the holder's frames")
	assert.NotEmpty(t, l)
}
