package fleet

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"streamgate/upstreamsim"
)

// ClientConfig is one streaming application.
type ClientConfig struct {
	Name  string
	Base  string   // the gateway's base URL, http://host:port (a balancer's)
	Feeds []string // the streams it subscribes to, all on each connection
	// HA: the client discovers the origins with a signed HEAD / and holds
	// one connection per origin (one when none is advertised, as the SDKs
	// fall back); it keeps a report only when its observationsTimestamp
	// is above the highest kept for its stream, as the SDKs deduplicate.
	// A plain client keeps every report it receives.
	HA bool
	// Sign signs a request (HEAD / and each upgrade); it must never sign
	// the same target twice with one timestamp: the gateway refuses a
	// signature it has seen.
	Sign func(*http.Request)
	// Phase, when set, is the scenario under way, stamped on each report
	// kept; Count tallies one phase.
	Phase *atomic.Int32
	// DiscoverTries bounds the HEAD / of an HA client, one second apart,
	// after which it holds one connection; 0 asks until answered.
	DiscoverTries int
	// DialTimeout bounds each connect (default 5s, the SDKs').
	DialTimeout time.Duration
	// OnConnect, when set, is called as each connection opens (first:
	// the first of its origin); what it returns watches that connection.
	OnConnect func(first bool) Watch
	// Notify, when set, is woken at each report kept.
	Notify *Notifier
}

// Watch is what a caller does with one connection of a client.
type Watch struct {
	// Report, when not nil, is called after each report of the
	// connection, kept or not, with the index of its stream in Feeds and
	// its observationsTimestamp.
	Report func(feed int, ts int64)
	// Quiet, when not nil and true as the connection ends, keeps its end
	// from being noted as the client's last error.
	Quiet func() bool
}

// reconnectDelay is the SDKs' wait after a close or a failed connect.
const reconnectDelay = time.Second

// Client is a ClientConfig running: it reconnects one second after any
// close or failed connect, as the SDKs do, and keeps, per stream, the
// seconds it received in arrival order. It is safe for concurrent use.
type Client struct {
	cfg   ClientConfig
	index map[string]int // stream → its index in cfg.Feeds

	mu         sync.Mutex
	got        [][]int64 // per stream, the seconds kept in arrival order
	phases     [][]mark  // per stream, where each phase's reports begin in got
	highest    []int64
	twins      int // HA: reports dropped by the deduplication
	connects   int // connections opened
	reconnects int // connections opened after an origin's first
	failures   int // connects that failed
	origins    []string
	lastErr    string
}

// mark is the index in a stream's got of the first report of a phase.
type mark struct {
	phase int32
	from  int
}

// NewClient returns the client of cfg, not yet running.
func NewClient(cfg ClientConfig) *Client {
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	c := &Client{cfg: cfg, index: make(map[string]int, len(cfg.Feeds)), got: make([][]int64, len(cfg.Feeds)),
		phases: make([][]mark, len(cfg.Feeds)), highest: make([]int64, len(cfg.Feeds))}
	for i, f := range cfg.Feeds {
		c.index[f] = i
	}
	return c
}

// Name is the client's name.
func (c *Client) Name() string { return c.cfg.Name }

// HA reports whether the client runs in HA mode.
func (c *Client) HA() bool { return c.cfg.HA }

// Feeds are the client's streams.
func (c *Client) Feeds() []string { return c.cfg.Feeds }

// Run streams until ctx ends; it returns at once, and wg is done when
// every goroutine of the client has ended.
func (c *Client) Run(ctx context.Context, wg *sync.WaitGroup) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		origins := []string{""}
		if c.cfg.HA {
			origins = c.discover(ctx)
		}
		c.mu.Lock()
		c.origins = origins
		c.mu.Unlock()
		for _, origin := range origins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := true // until the origin's first connection opens
				for ctx.Err() == nil {
					if c.stream(ctx, origin, first) {
						first = false
					}
					select {
					case <-ctx.Done():
					case <-time.After(reconnectDelay):
					}
				}
			}()
		}
	}()
}

// fail notes an error: every failed connect, and the end of a connection
// unless ctx ended it.
func (c *Client) fail(ctx context.Context, err error, dial bool) {
	if !dial && ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err.Error()
	if dial {
		c.failures++
	}
}

// discover asks for the origins with a signed HEAD /, one second apart,
// until it has an answer (or DiscoverTries are spent: one connection).
func (c *Client) discover(ctx context.Context) []string {
	for try := 0; ctx.Err() == nil && (c.cfg.DiscoverTries == 0 || try < c.cfg.DiscoverTries); try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, c.cfg.Base+"/", nil)
		if err != nil {
			c.fail(ctx, err, false)
			return []string{""}
		}
		c.cfg.Sign(req)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				v := strings.Trim(resp.Header.Get(upstreamsim.OriginsHeader), "{}")
				if v == "" {
					return []string{""}
				}
				return strings.Split(v, ",")
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(reconnectDelay):
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return []string{""}
}

// stream holds one connection until it ends; it reports whether it
// connected.
func (c *Client) stream(ctx context.Context, origin string, first bool) bool {
	target := "/api/v1/ws?feedIDs=" + strings.Join(c.cfg.Feeds, ",")
	req, err := http.NewRequest(http.MethodGet, c.cfg.Base+target, nil)
	if err != nil {
		c.fail(ctx, err, true)
		return false
	}
	c.cfg.Sign(req)
	if origin != "" {
		req.Header.Set(upstreamsim.OriginHeader, origin)
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.DialTimeout)
	conn, resp, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(c.cfg.Base, "http")+target, &websocket.DialOptions{HTTPHeader: req.Header})
	cancel()
	if err != nil {
		if resp != nil {
			err = fmt.Errorf("upgrade: status %d: %w", resp.StatusCode, err)
		}
		c.fail(ctx, err, true)
		return false
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 10)
	c.mu.Lock()
	c.connects++
	if !first {
		c.reconnects++
	}
	c.mu.Unlock()
	var w Watch
	if c.cfg.OnConnect != nil {
		w = c.cfg.OnConnect(first)
	}
	err = ReadFrames(ctx, conn, func(feed []byte, ts, _ int64) {
		i, ok := c.index[string(feed)]
		if !ok {
			return
		}
		c.keep(i, ts)
		if w.Report != nil {
			w.Report(i, ts)
		}
	})
	if w.Quiet == nil || !w.Quiet() {
		c.fail(ctx, err, false)
	}
	return true
}

// keep records a report of stream i: a plain client keeps every one, an
// HA client only one newer than the newest it has.
func (c *Client) keep(i int, ts int64) {
	c.mu.Lock()
	if c.cfg.HA && ts <= c.highest[i] {
		c.twins++
		c.mu.Unlock()
		return
	}
	var phase int32
	if c.cfg.Phase != nil {
		phase = c.cfg.Phase.Load()
	}
	if ms := c.phases[i]; len(ms) == 0 || ms[len(ms)-1].phase != phase {
		c.phases[i] = append(ms, mark{phase: phase, from: len(c.got[i])})
	}
	c.highest[i] = max(c.highest[i], ts)
	c.got[i] = append(c.got[i], ts)
	c.mu.Unlock()
	if c.cfg.Notify != nil {
		c.cfg.Notify.wake()
	}
}

// Highest is the newest second kept of stream feed (0: none).
func (c *Client) Highest(feed string) int64 {
	i, ok := c.index[feed]
	if !ok {
		return 0
	}
	return c.HighestAt(i)
}

// HighestAt is the newest second kept of the stream at index i of Feeds.
func (c *Client) HighestAt(i int) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.highest[i]
}

// First is the first second kept of stream feed; ok is false when none
// was.
func (c *Client) First(feed string) (ts int64, ok bool) {
	i, known := c.index[feed]
	c.mu.Lock()
	defer c.mu.Unlock()
	if !known || len(c.got[i]) == 0 {
		return 0, false
	}
	return c.got[i][0], true
}

// Stats are a client's connection counts so far.
type Stats struct {
	Origins    []string // the origins it holds a connection to ("": none named)
	Connects   int      // connections opened
	Reconnects int      // connections opened after an origin's first
	Failures   int      // connects that failed
	Twins      int      // HA: reports dropped by the deduplication
	LastErr    string   // the last error, of a connect or a connection's end
}

// Stats returns the counts so far.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Origins: c.origins, Connects: c.connects, Reconnects: c.reconnects, Failures: c.failures,
		Twins: c.twins, LastErr: c.lastErr}
}

// Tally is what a client saw of one phase's window.
type Tally struct {
	Pairs      int      // (stream, second) pairs of the window
	Missing    int      // pairs of the window never received
	Repeated   int      // reports received during the phase that the client already had
	RepeatMost int      // the most times one pair came again
	Disordered int      // reports received during the phase after a later one of their stream
	First      []string // the first missing pairs
	Odd        []string // the first pairs received twice or out of order
}

// Count tallies phase, whose window is (lo[feed], hi[feed]] per stream: a
// stream missing from lo or hi is not counted.
func (c *Client) Count(phase int32, lo, hi map[string]int64) Tally {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t Tally
	for i, feed := range c.cfg.Feeds {
		l, okl := lo[feed]
		h, okh := hi[feed]
		if !okl || !okh {
			continue
		}
		seen := map[int64]bool{}
		again := map[int64]int{}
		var top int64
		ms := c.phases[i]
		var cur int32
		for j, ts := range c.got[i] {
			for len(ms) > 0 && ms[0].from == j {
				cur, ms = ms[0].phase, ms[1:]
			}
			if cur == phase {
				switch {
				case seen[ts]:
					t.Repeated++
					again[ts]++
					t.RepeatMost = max(t.RepeatMost, again[ts])
					if len(t.Odd) < 6 {
						t.Odd = append(t.Odd, fmt.Sprintf("twice %s…@%d", short(feed), ts))
					}
				case ts < top:
					t.Disordered++
					if len(t.Odd) < 6 {
						t.Odd = append(t.Odd, fmt.Sprintf("late %s…@%d after %d", short(feed), ts, top))
					}
				}
			}
			seen[ts] = true
			top = max(top, ts)
		}
		for ts := l + 1; ts <= h; ts++ {
			t.Pairs++
			if !seen[ts] {
				t.Missing++
				if len(t.First) < 6 {
					t.First = append(t.First, fmt.Sprintf("%s…@%d", short(feed), ts))
				}
			}
		}
	}
	return t
}

// short is the head of a stream ID, for messages.
func short(feed string) string { return feed[:min(len(feed), 14)] }

// Notifier wakes those waiting for a change of clients that share it. The
// zero value is ready to use; it is safe for concurrent use.
type Notifier struct {
	waiting atomic.Bool
	mu      sync.Mutex
	ch      chan struct{}
}

func (n *Notifier) wake() {
	if !n.waiting.Load() {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
		n.waiting.Store(false)
	}
}

func (n *Notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
		n.waiting.Store(true)
	}
	return n.ch
}

// Await returns true once cond holds, checking it at each change; false
// when ctx ends or timeout passes first.
func (n *Notifier) Await(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		ch := n.changed()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-t.C:
			return cond()
		}
	}
}
