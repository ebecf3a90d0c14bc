package wsgate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// events is an ordered log of what the test saw.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

func (e *events) index(s string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, x := range e.log {
		if x == s {
			return i
		}
	}
	return -1
}

// TestWSDrain: a replica told to shut down turns not ready at once, goes
// on streaming for realtime.drain_delay, then closes its clients with
// 1001; of an HA client's two connections, the second is closed only after
// the first has reconnected, here on another replica; a plain connection of
// the same key and streams is closed in the first steps, on its own.
func TestWSDrain(t *testing.T) {
	rs := redistest.New(t)
	sim := fastSimulator(t)
	envs := sharedReplicas(t, rs, sim, 2, func(c *config.Config) { c.Realtime.DrainDelay = 1500 * time.Millisecond })
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	demo := servertest.Demo()
	btc := envs[0].FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	target := "/api/v1/ws?feedIDs=" + btc

	var ev events
	conns := map[string]*websocket.Conn{}
	for _, o := range []string{"001", "002"} {
		c, _, err := dialOrigin(ctx, demo, envs[0].Mainnet, target, o)
		require.NoError(t, err)
		defer c.CloseNow()
		conns[o] = c
		readFrames(t, ctx, c, 1)
	}
	// A plain connection of the same key and streams is a client of its
	// own: it is closed in the first steps, not held as one of the pair.
	plain, _, err := dialOrigin(ctx, demo, envs[0].Mainnet, target, "")
	require.NoError(t, err)
	defer plain.CloseNow()
	readFrames(t, ctx, plain, 1)
	conns["plain"] = plain
	require.True(t, envs[0].Server.Ready())

	shut := make(chan error, 1)
	go func() {
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer scancel()
		shut <- envs[0].Server.Shutdown(sctx)
	}()
	require.Eventually(t, func() bool { return !envs[0].Server.Ready() }, 10*time.Second, time.Millisecond, "not ready from the start of the drain")
	ev.add("not ready")
	// Streaming goes on while the balancer lets the replica go.
	readFrames(t, ctx, conns["001"], 1)
	readFrames(t, ctx, conns["002"], 1)
	readFrames(t, ctx, conns["plain"], 1)
	ev.add("streamed while not ready")

	closed := map[string]chan error{}
	for o, c := range conns {
		ch := make(chan error, 1)
		closed[o] = ch
		go func() {
			streamed := false
			for {
				if _, _, err := c.Read(ctx); err != nil {
					ev.add(o + " closed")
					ch <- err
					return
				}
				if o == "002" && !streamed && ev.index("001 closed") >= 0 {
					streamed = true
					ev.add("002 streamed after 001 closed")
				}
			}
		}()
	}
	err = <-closed["001"]
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
	err = <-closed["plain"]
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
	select {
	case err := <-closed["002"]:
		t.Fatalf("both connections of the HA client closed before it reconnected: %v", err)
	default:
	}
	ev.add("reconnecting 001")
	again, _, err := dialOrigin(ctx, demo, envs[1].Mainnet, target, "001")
	require.NoError(t, err)
	defer again.CloseNow()
	readFrames(t, ctx, again, 1)

	err = <-closed["002"]
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
	assert.Less(t, ev.index("streamed while not ready"), ev.index("001 closed"))
	assert.Less(t, ev.index("reconnecting 001"), ev.index("002 closed"), "the second connection closed after the first reconnected: %v", ev.log)
	assert.GreaterOrEqual(t, ev.index("002 streamed after 001 closed"), 0, "the second connection streamed on while the first reconnected: %v", ev.log)
	require.NoError(t, <-shut)
}
