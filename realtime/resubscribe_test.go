package realtime

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/realtime/share"
	"streamgate/redisconn"
)

// holes is a go-redis hook whose Swallow makes every connection the client
// has open at that moment deliver nothing more, its writes still going
// through: a half-open TCP connection, as to a master whose host vanished
// without a reset. Connections dialled afterwards work.
type holes struct {
	mu    sync.Mutex
	conns []*holeConn
}

type holeConn struct {
	net.Conn
	hole atomic.Bool
}

// Read discards what arrives while the connection is a hole: the reader
// waits until its deadline, as on a silent connection.
func (c *holeConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.hole.Load() || err != nil {
			return n, err
		}
	}
}

func (h *holes) Swallow() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.hole.Store(true)
	}
}

func (h *holes) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		cn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		c := &holeConn{Conn: cn}
		h.mu.Lock()
		h.conns = append(h.conns, c)
		h.mu.Unlock()
		return c, nil
	}
}

func (h *holes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *holes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A follower's subscription goes silent: its connection stays open and
// delivers nothing, which the client does not notice (a read timeout is
// not an error to it). The follower no longer hears its own presence
// message, subscribes again, and follows the holder again: one upstream
// connection, every report once and in order on every replica.
func TestShareResubscribesWhenSilent(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	hubs := make([]*Hub, 3)
	cols := make([]*collector, 3)
	hs := make([]*holes, 3)
	for i := range hubs {
		c, err := redisconn.NewURL(rs.URL(), "", redisconn.Options{})
		require.NoError(t, err)
		hs[i] = &holes{}
		c.AddHook(hs[i])
		t.Cleanup(func() { c.Close() })
		hubs[i] = e.hub(t, func(cfg *Config) {
			cfg.Share = &share.Config{Client: c, Lease: shareLease, Replica: "r" + strconv.Itoa(i)}
		})
		cols[i] = collect(t, subscribe(t, hubs[i], feeds, SubscribeOptions{}))
	}
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	awaitMore(t, cols, feeds[0], 5)

	f := (holders(hubs)[0] + 1) % len(hubs)
	hs[f].Swallow()
	require.Eventually(t, func() bool { return hubs[f].Stats().Share.Resubscribed > 0 }, wait, 10*time.Millisecond,
		"the silent subscription is made again")
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	received := hubs[f].Stats().Share.Received
	awaitMore(t, cols, feeds[0], 20)
	assert.Greater(t, hubs[f].Stats().Share.Received, received, "the follower receives through Redis again")
	require.True(t, settled(e, hubs), "one upstream connection, held by one replica")
	for _, c := range cols {
		for _, feed := range feeds {
			increasing(t, c.of(feed))
		}
	}
}

// Redis stops taking writes for longer than a presence lasts but shorter
// than the leases (a short failover) while every replica stays up: once
// it takes them again, every replica looks dead until its next presence
// write, but none frees another's lease for that: no lease is reaped and
// the holder keeps its chunk.
func TestShareOutageReapsNobody(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 2)
	hubs := make([]*Hub, 3)
	cols := make([]*collector, 3)
	for i := range hubs {
		c, err := redisconn.NewURL(rs.URL(), "", redisconn.Options{})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		hubs[i] = e.hub(t, func(cfg *Config) {
			cfg.Share = &share.Config{Client: c, Lease: 9 * time.Second, Replica: "r" + strconv.Itoa(i)}
		})
		cols[i] = collect(t, subscribe(t, hubs[i], feeds, SubscribeOptions{}))
	}
	e.run(t, 20*time.Millisecond)
	require.Eventually(t, func() bool { return settled(e, hubs) }, wait, 10*time.Millisecond)
	holder := holders(hubs)[0]
	reaping := func(want bool) func() bool {
		return func() bool {
			for _, h := range hubs {
				if h.Stats().Share.Reaping != want {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, reaping(true), wait, 10*time.Millisecond, "every replica present long enough to free leases")

	// Redis itself ends the pause, 1.5 s on by its clock: every presence
	// (800 ms) has expired by then, no lease (9 s) has.
	admin := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer admin.Close()
	require.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", "1500", "WRITE").Err())
	require.Eventually(t, reaping(false), wait, 10*time.Millisecond, "every replica's presence write failed")
	require.Eventually(t, reaping(true), wait, 10*time.Millisecond, "every replica present again long enough to free leases")
	awaitMore(t, cols, feeds[0], 10)
	for i, h := range hubs {
		assert.Zero(t, h.Stats().Share.Reaped, "replica %d freed a live replica's lease", i)
	}
	assert.Equal(t, []int{holder}, holders(hubs), "the holder kept its chunk")
	assert.True(t, settled(e, hubs), "one upstream connection")
}
