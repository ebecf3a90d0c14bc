package fleet

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/upstreamsim"
)

var (
	feedA = "0x0003aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	feedB = "0x0003bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

type sent struct {
	feed string
	ts   int64
}

// streamServer is a gateway stand-in: HEAD / advertises origins (none
// when empty); each WebSocket connection is sent the next script of
// reports, then closed, and once the scripts are spent a connection is
// sent script last and held open.
type streamServer struct {
	origins string
	mu      sync.Mutex
	scripts [][]sent
	last    []sent
	signed  atomic.Int64 // requests that carried the client's signature
	byOrig  sync.Map     // origin → connections
}

func (s *streamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Test-Signed") == "yes" {
		s.signed.Add(1)
	}
	if r.Method == http.MethodHead {
		if s.origins != "" {
			w.Header().Set(upstreamsim.OriginsHeader, s.origins)
		}
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	n, _ := s.byOrig.LoadOrStore(r.Header.Get(upstreamsim.OriginHeader), new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	s.mu.Lock()
	script, hold := s.last, true
	if len(s.scripts) > 0 {
		script, hold, s.scripts = s.scripts[0], false, s.scripts[1:]
	}
	s.mu.Unlock()
	for _, m := range script {
		frame := fmt.Sprintf(`{"report":{"feedID":%q,"observationsTimestamp":%d}}`, m.feed, m.ts)
		if c.Write(r.Context(), websocket.MessageText, []byte(frame)) != nil {
			return
		}
	}
	if hold {
		c.Read(r.Context()) // until the client goes
		return
	}
	c.Close(websocket.StatusGoingAway, "restarting")
}

func sign(req *http.Request) { req.Header.Set("X-Test-Signed", "yes") }

// A plain client reconnects after a close and keeps every report: the
// tally of its phase counts the pairs of the window, the one never
// received, the one received twice and the one received after a later one.
func TestClientCountsPlain(t *testing.T) {
	srv := &streamServer{
		scripts: [][]sent{{{feedA, 1}, {feedA, 2}, {feedB, 1}, {feedA, 4}}},
		last:    []sent{{feedA, 2}, {feedA, 3}, {feedA, 5}, {feedB, 2}, {feedB, 3}},
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var phase atomic.Int32
	phase.Store(1)
	var n Notifier
	c := NewClient(ClientConfig{Name: "plain", Base: hs.URL, Feeds: []string{feedA, feedB}, Sign: sign, Phase: &phase, Notify: &n})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c.Run(ctx, &wg)
	require.True(t, n.Await(ctx, 30*time.Second, func() bool { return c.Highest(feedA) == 5 && c.Highest(feedB) == 3 }),
		"the client receives both connections' reports")
	cancel()
	wg.Wait()

	got := c.Count(1, map[string]int64{feedA: 0, feedB: 0}, map[string]int64{feedA: 5, feedB: 4})
	assert.Equal(t, 9, got.Pairs)
	assert.Equal(t, 1, got.Missing, "%v", got.First)
	assert.Equal(t, []string{short(feedB) + "…@4"}, got.First)
	assert.Equal(t, 1, got.Repeated, "A@2 twice: %v", got.Odd)
	assert.Equal(t, 1, got.RepeatMost)
	assert.Equal(t, 1, got.Disordered, "A@3 after A@4: %v", got.Odd)
	assert.Zero(t, c.Count(2, map[string]int64{feedA: 0}, map[string]int64{feedA: 5}).Repeated, "no report of phase 2")
	first, ok := c.First(feedA)
	assert.True(t, ok)
	assert.EqualValues(t, 1, first)
	st := c.Stats()
	assert.Equal(t, 2, st.Connects)
	assert.Equal(t, 1, st.Reconnects)
	assert.Zero(t, st.Failures)
	assert.Equal(t, []string{""}, st.Origins)
	assert.EqualValues(t, 2, srv.signed.Load(), "every upgrade signed")
}

// An HA client holds one connection per advertised origin and keeps a
// report only when it is newer than the newest of its stream.
func TestClientHADeduplicates(t *testing.T) {
	srv := &streamServer{origins: "{001,002}", last: []sent{{feedA, 1}, {feedA, 2}}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var n Notifier
	var observed atomic.Int64
	c := NewClient(ClientConfig{Name: "ha", Base: hs.URL, Feeds: []string{feedA}, HA: true, Sign: sign, Notify: &n,
		OnConnect: func(first bool) Watch {
			assert.True(t, first)
			return Watch{Report: func(int, int64) { observed.Add(1) }, Quiet: func() bool { return true }}
		}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c.Run(ctx, &wg)
	require.Eventually(t, func() bool { return observed.Load() == 4 }, 30*time.Second, time.Millisecond,
		"both connections' reports observed")
	cancel()
	wg.Wait()
	got := c.Count(0, map[string]int64{feedA: 0}, map[string]int64{feedA: 2})
	assert.Equal(t, Tally{Pairs: 2}, got)
	st := c.Stats()
	assert.Equal(t, []string{"001", "002"}, st.Origins)
	assert.Equal(t, 2, st.Connects)
	assert.Equal(t, 2, st.Twins, "the second origin's copies dropped")
	for _, o := range []string{"001", "002"} {
		v, ok := srv.byOrig.Load(o)
		require.True(t, ok, o)
		assert.EqualValues(t, 1, v.(*atomic.Int64).Load(), o)
	}
	assert.EqualValues(t, 3, srv.signed.Load(), "HEAD / and both upgrades signed")
}

// Await returns once the condition holds after a wake, and false at its
// timeout when it never does.
func TestNotifierAwait(t *testing.T) {
	var n Notifier
	var v atomic.Int64
	done := make(chan bool)
	go func() { done <- n.Await(context.Background(), time.Minute, func() bool { return v.Load() == 3 }) }()
	for range 3 {
		v.Add(1)
		n.wake()
	}
	assert.True(t, <-done)
	assert.False(t, n.Await(context.Background(), time.Millisecond, func() bool { return false }))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.False(t, n.Await(ctx, time.Minute, func() bool { return false }))
}
