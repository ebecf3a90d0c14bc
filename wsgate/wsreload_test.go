package wsgate_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/feedid"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// wsReader reads one client's frames in the background and keeps them,
// each with the time it was read, until the connection ends.
type wsReader struct {
	mu     sync.Mutex
	frames []frame
	err    error
	done   chan struct{}
}

func readInBackground(ctx context.Context, c *websocket.Conn) *wsReader {
	r := &wsReader{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			_, data, err := c.Read(ctx)
			r.mu.Lock()
			if err != nil {
				r.err = err
				r.mu.Unlock()
				return
			}
			var f frame
			if json.Unmarshal(data, &f) == nil {
				r.frames = append(r.frames, f)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// count returns how many frames of feed were read with a timestamp after ts.
func (r *wsReader) count(feed string, after int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, f := range r.frames {
		if f.Report.FeedID == feed && f.Report.ObservationsTimestamp > after {
			n++
		}
	}
	return n
}

func (r *wsReader) closed() (error, bool) {
	select {
	case <-r.done:
		return r.err, true
	default:
		return nil, false
	}
}

// TestWSReloadReachesOpenConnections: a reload checks every open client
// again. A stream removed from the team's feeds stops at once for an open
// connection, which goes on with its other stream; a removed key and a
// removed team close their connections with 1008 and the reason; a client
// untouched by the reload keeps streaming.
func TestWSReloadReachesOpenConnections(t *testing.T) {
	const (
		k1, k2, k3 = "ops-key-1", "ops-key-2", "desk-key-1"
		secret     = "reload-secret-0123456789"
	)
	sim, err := upstreamsim.New(func() upstreamsim.Config { c := upstreamsim.Default(); c.RateLimit = 0; return c }())
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	probe := &servertest.Env{Sim: sim}
	btc := probe.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := probe.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	streamIDs := func(items ...string) config.StreamIDs {
		ids, err := feedid.ParseAll(items)
		require.NoError(t, err)
		return ids
	}
	teams := func(opsFeeds []string, opsKeys []string, desk bool) []config.Team {
		ops := config.Team{Name: "ops", Networks: []string{"mainnet"}, Feeds: streamIDs(opsFeeds...)}
		for _, k := range opsKeys {
			ops.Keys = append(ops.Keys, config.Key{ID: k, Secret: secret})
		}
		out := []config.Team{ops}
		if desk {
			out = append(out, config.Team{Name: "desk", Networks: []string{"mainnet"}, Feeds: streamIDs(btc),
				Keys: []config.Key{{ID: k3, Secret: secret}}})
		}
		return out
	}
	env := servertest.Start(t, servertest.Options{Simulator: sim, Config: func(c *config.Config) {
		c.Teams = append(c.Teams, teams([]string{btc, eth}, []string{k1, k2}, true)...)
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	client := func(key string) *servertest.Client { return &servertest.Client{Key: key, Secret: secret} }
	dial := func(key, feeds string) *wsReader {
		c, _, err := dialWS(ctx, client(key), env.Mainnet, "/api/v1/ws?feedIDs="+feeds, "")
		require.NoError(t, err, key)
		t.Cleanup(func() { c.CloseNow() })
		return readInBackground(ctx, c)
	}
	a := dial(k1, btc+","+eth)
	b := dial(k2, btc)
	d := dial(k3, btc)
	dc, _, err := dialWS(ctx, servertest.Demo(), env.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
	require.NoError(t, err)
	t.Cleanup(func() { dc.CloseNow() })
	other := readInBackground(ctx, dc)
	require.Eventually(t, func() bool { return a.count(eth, 0) >= 1 && a.count(btc, 0) >= 1 },
		30*time.Second, 20*time.Millisecond, "client a streams both before the reload")

	// eth leaves the ops team's feeds.
	next := *env.Config
	next.Teams = append([]config.Team{env.Config.Teams[0]}, teams([]string{btc}, []string{k1, k2}, true)...)
	require.NoError(t, env.Gateway.Reload(&next))
	// Every report of a later second was published after the reload.
	cut := time.Now().Unix() + 1
	require.Eventually(t, func() bool { return a.count(btc, cut) >= 3 }, 30*time.Second, 20*time.Millisecond,
		"client a goes on with btc")
	assert.Zero(t, a.count(eth, cut), "eth stopped at once for the open connection")
	_, aClosed := a.closed()
	assert.False(t, aClosed, "the connection itself stays")

	// Key k2 and the desk team leave.
	next2 := next
	next2.Teams = append([]config.Team{env.Config.Teams[0]}, teams([]string{btc}, []string{k1}, false)...)
	require.NoError(t, env.Gateway.Reload(&next2))
	for name, r := range map[string]*wsReader{"key removed": b, "team removed": d} {
		select {
		case <-r.done:
		case <-ctx.Done():
			t.Fatalf("%s: the connection stayed open", name)
		}
		assert.Equal(t, websocket.StatusPolicyViolation, websocket.CloseStatus(r.err), "%s: %v", name, r.err)
	}
	assert.Contains(t, b.err.Error(), "key")
	assert.Contains(t, d.err.Error(), "team")
	cut = time.Now().Unix() + 1
	require.Eventually(t, func() bool { return a.count(btc, cut) >= 2 && other.count(eth, cut) >= 2 },
		30*time.Second, 20*time.Millisecond, "the clients the reload did not touch keep streaming")
}
