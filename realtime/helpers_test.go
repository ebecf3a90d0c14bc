package realtime

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/feedid"
	"streamgate/upstreamsim"
)

// t0 is the tests' clock at start.
var t0 = time.Unix(1758586188, 0).UTC()

// env is a simulated mainnet upstream over loopback, on a fake clock
// (the one clock of the simulator and the hub: the reports' time, the
// signatures' and continuity's timers) whose WebSocket connections look
// for new reports every 2 ms.
type env struct {
	sim *upstreamsim.Simulator
	srv *httptest.Server
	clk *clockwork.FakeClock
}

func newEnv(t testing.TB, mutate func(*upstreamsim.Config)) *env {
	t.Helper()
	clk := clockwork.NewFakeClockAt(t0)
	cfg := upstreamsim.Default()
	cfg.Now = clk.Now
	cfg.RateLimit, cfg.Burst = 0, 0
	cfg.WSTick = 2 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	sim, err := upstreamsim.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(sim.Handler(upstreamsim.Mainnet))
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		sim.Close()
	})
	return &env{sim: sim, srv: srv, clk: clk}
}

// hub starts a hub on the env with short test settings.
func (e *env) hub(t testing.TB, mutate func(*Config)) *Hub {
	t.Helper()
	h, err := New(e.config(mutate))
	require.NoError(t, err)
	t.Cleanup(h.Close)
	return h
}

// config is the Config of a hub on the env with short test settings.
func (e *env) config(mutate func(*Config)) Config {
	cfg := Config{
		Network: "mainnet",
		URL:     "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/ignored/path",
		APIKey:  upstreamsim.OrgKeyID,
		Secret:  []byte(upstreamsim.OrgKeySecret),
		// The sizes the configuration gives by default (ws_max_connections
		// 6 is the configuration's; the hub tests were written for 4).
		MaxConnections:     4,
		FeedsPerConnection: 50,
		Grace:              200 * time.Millisecond,
		StallTimeout:       600 * time.Millisecond,
		Clock:              e.clk,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

// run moves the clock one second every period until the test ends.
func (e *env) run(t testing.TB, period time.Duration) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(period)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
				e.clk.Advance(time.Second)
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait() })
}

// passes waits until the env's clock has moved d from now (run moves it).
func (e *env) passes(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-e.clk.After(d):
	case <-time.After(wait):
		t.Fatalf("the clock did not move %v within %v", d, wait)
	}
}

// open returns the upstream WebSocket connections open now.
func (e *env) open() int64 { return e.sim.Counters().WSTotal(upstreamsim.Mainnet).Open }

// rest returns the REST answer for feed at ts.
func (e *env) rest(t *testing.T, feed feedid.ID, ts int64) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+"/api/v1/reports?feedID="+string(feed)+"&timestamp="+strconv.FormatInt(ts, 10), nil)
	require.NoError(t, err)
	auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), e.clk.Now())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return b
}

// crypto returns n mainnet feeds published every second.
func (e *env) crypto(t testing.TB, n int) []feedid.ID {
	t.Helper()
	var out []feedid.ID
	for _, s := range e.sim.Streams(upstreamsim.Mainnet) {
		if strings.HasSuffix(s.Name, "-RefPrice-DS-Premium-Global-003") && !slices.Contains(e.sim.Hidden(upstreamsim.Mainnet), s.FeedID) {
			out = append(out, feedid.ID(s.FeedID))
		}
	}
	require.GreaterOrEqual(t, len(out), n)
	return out[:n]
}

// frame is one frame a collector received.
type frame struct {
	feed feedid.ID
	ts   int64
	data []byte
}

// collector reads a subscription into memory.
type collector struct {
	sub  *Subscription
	mu   sync.Mutex
	got  []frame
	done chan struct{}
}

func collect(t testing.TB, sub *Subscription) *collector {
	c := &collector{sub: sub, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for fr := range sub.C() {
			b := fr.Bytes
			id, ts, ok := parseFrame(b)
			if !ok {
				panic("unparsable frame: " + string(b))
			}
			if fr.Stream != feedid.ID(id) || fr.ObservationsTimestamp != ts {
				panic(fmt.Sprintf("frame delivered as %s at %d, its bytes say %s at %d", fr.Stream, fr.ObservationsTimestamp, id, ts))
			}
			c.mu.Lock()
			c.got = append(c.got, frame{feedid.ID(id), ts, b})
			c.mu.Unlock()
		}
	}()
	t.Cleanup(sub.Close)
	return c
}

// of returns the frames of feed received so far.
func (c *collector) of(feed feedid.ID) []frame {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []frame
	for _, f := range c.got {
		if f.feed == feed {
			out = append(out, f)
		}
	}
	return out
}

func (c *collector) count(feed feedid.ID) int { return len(c.of(feed)) }

// awaitMore waits until every collector has n more frames of feed than
// now, and returns how many each had before.
func awaitMore(t *testing.T, cols []*collector, feed feedid.ID, n int) []int {
	t.Helper()
	before := make([]int, len(cols))
	for i, c := range cols {
		before[i] = c.count(feed)
	}
	require.Eventually(t, func() bool {
		for i, c := range cols {
			if c.count(feed) < before[i]+n {
				return false
			}
		}
		return true
	}, wait, 10*time.Millisecond, "%d more frames of %s at every collector", n, feed)
	return before
}

// counts returns how many frames of each feed every collector has now.
func counts(cols []*collector, feeds []feedid.ID) []map[feedid.ID]int {
	out := make([]map[feedid.ID]int, len(cols))
	for i, c := range cols {
		out[i] = map[feedid.ID]int{}
		for _, f := range feeds {
			out[i][f] = c.count(f)
		}
	}
	return out
}

// awaitEach waits until every collector has n more frames of each feed
// than it had at from (counts).
func awaitEach(t *testing.T, cols []*collector, feeds []feedid.ID, from []map[feedid.ID]int, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for i, c := range cols {
			for _, f := range feeds {
				if c.count(f) < from[i][f]+n {
					return false
				}
			}
		}
		return true
	}, wait, 10*time.Millisecond, "%d more frames of each feed at every collector", n)
}

// consecutive checks that the frames of feed follow each other second by
// second: no gap, no duplicate, in order.
func consecutive(t *testing.T, fs []frame) {
	t.Helper()
	for i := 1; i < len(fs); i++ {
		require.Equal(t, fs[i-1].ts+1, fs[i].ts, "frame %d of %s follows %d", i, fs[i].feed, fs[i-1].ts)
	}
}

// increasing checks that the frames strictly increase.
func increasing(t testing.TB, fs []frame) {
	t.Helper()
	for i := 1; i < len(fs); i++ {
		require.Less(t, fs[i-1].ts, fs[i].ts, "frame %d of %s", i, fs[i].feed)
	}
}

const wait = 15 * time.Second

type simulatorConfig = upstreamsim.Config

func simulatorDrop() upstreamsim.WSDrop { return upstreamsim.WSDrop{} }

func simulatorDropOrigin(o string) upstreamsim.WSDrop { return upstreamsim.WSDrop{Origin: o} }

func stall(on bool) upstreamsim.Faults { return upstreamsim.Faults{WSStall: on} }

func refuse(status int) upstreamsim.Faults { return upstreamsim.Faults{WSRefuse: status} }

// subscribe subscribes feeds on h with o; it must not be refused.
func subscribe(t testing.TB, h *Hub, feeds []feedid.ID, o SubscribeOptions) *Subscription {
	t.Helper()
	s, err := h.Subscribe(feeds, o)
	require.NoError(t, err)
	return s
}
