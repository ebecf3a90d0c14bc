package upstreamsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"streamgate/internal/wsupgrade"
)

// Defaults and bounds of the WebSocket stream.
const (
	// DefaultWSMaxConnsPerKey is the published limit of concurrent
	// WebSocket connections per user.
	DefaultWSMaxConnsPerKey = 20
	defaultWSPingInterval   = 15 * time.Second
	maxWSPongWait           = 5 * time.Second
	defaultWSWriteTimeout   = 10 * time.Second
	// wsTickLag is how long after a whole second a connection on the
	// default tick looks for the reports of that second.
	wsTickLag = 5 * time.Millisecond
	// wsMaxCatchUp is the most reports of one stream sent in one tick: the
	// seconds a late tick or a stall skipped, up to this many.
	wsMaxCatchUp = 10
)

// wsState is the WebSocket side of a Simulator: its settings, the open
// connections and the stall fault.
type wsState struct {
	maxPerKey    int // 0: no cap
	tick         time.Duration
	pingEvery    time.Duration // 0: no pings
	pongWait     time.Duration
	writeTimeout time.Duration

	mu     sync.Mutex
	conns  map[*wsConn]struct{}
	perKey map[wsCountKey]int // reserved slots, by network and key ID

	stall atomic.Pointer[stallState] // nil when not stalled
}

// stallState is a stall in force; over is closed when it ends or changes.
type stallState struct {
	origin string // "" every origin
	over   chan struct{}
}

func (ws *wsState) init(cfg Config) {
	ws.maxPerKey = cfg.WSMaxConnsPerKey
	switch {
	case ws.maxPerKey == 0:
		ws.maxPerKey = DefaultWSMaxConnsPerKey
	case ws.maxPerKey < 0:
		ws.maxPerKey = 0
	}
	ws.tick = cfg.WSTick
	ws.pingEvery = cfg.WSPingInterval
	switch {
	case ws.pingEvery == 0:
		ws.pingEvery = defaultWSPingInterval
	case ws.pingEvery < 0:
		ws.pingEvery = 0
	}
	ws.pongWait = min(ws.pingEvery, maxWSPongWait)
	ws.writeTimeout = cfg.WSWriteTimeout
	if ws.writeTimeout == 0 {
		ws.writeTimeout = defaultWSWriteTimeout
	}
	ws.conns = map[*wsConn]struct{}{}
	ws.perKey = map[wsCountKey]int{}
}

// setStall applies the stall fault of f. Its callers are serialised.
func (ws *wsState) setStall(f Faults) {
	old := ws.stall.Load()
	if !f.WSStall {
		if old != nil {
			ws.stall.Store(nil)
			close(old.over)
		}
		return
	}
	if old != nil && old.origin == f.WSStallOrigin {
		return
	}
	ws.stall.Store(&stallState{origin: f.WSStallOrigin, over: make(chan struct{})})
	if old != nil {
		close(old.over) // waiters look again
	}
}

// stalled returns the stall that holds the connections of origin, or nil.
func (ws *wsState) stalled(origin string) *stallState {
	st := ws.stall.Load()
	if st == nil || (st.origin != "" && st.origin != origin) {
		return nil
	}
	return st
}

// waitStall returns once no stall holds origin (true) or when closed is
// closed (false).
func (ws *wsState) waitStall(origin string, closed <-chan struct{}) bool {
	for {
		st := ws.stalled(origin)
		if st == nil {
			return true
		}
		select {
		case <-st.over:
		case <-closed:
			return false
		}
	}
}

// reserve takes one of the connection slots of k; false when none is left.
func (ws *wsState) reserve(k wsCountKey) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.maxPerKey > 0 && ws.perKey[k] >= ws.maxPerKey {
		return false
	}
	ws.perKey[k]++
	return true
}

func (ws *wsState) release(k wsCountKey) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.perKey[k]--; ws.perKey[k] <= 0 {
		delete(ws.perKey, k)
	}
}

// WSDrop selects the WebSocket connections that DropWS closes.
type WSDrop struct {
	// Network and Origin select the connections of one network and of one
	// HA origin; "" selects all.
	Network string `json:"network"`
	Origin  string `json:"origin"`
	// Abrupt closes the TCP connections without a close frame; otherwise
	// each gets a close frame with status 1001 (going away).
	Abrupt bool `json:"abrupt"`
}

// DropWS closes the open WebSocket connections that d selects, at once,
// and returns how many it closes (a connection already being dropped is
// not counted again). The closing is done by each
// connection's own goroutine: a client sees it a moment after DropWS
// returns.
func (s *Simulator) DropWS(d WSDrop) int {
	s.ws.mu.Lock()
	defer s.ws.mu.Unlock()
	n := 0
	for wc := range s.ws.conns {
		if (d.Network == "" || d.Network == wc.n.name) && (d.Origin == "" || d.Origin == wc.origin) {
			wc.dropOnce.Do(func() {
				wc.abrupt = d.Abrupt
				close(wc.drop)
				n++
			})
		}
	}
	return n
}

// wsQueryError is a malformed /api/v1/ws query (400).
type wsQueryError string

func (e wsQueryError) Error() string { return string(e) }

// parseWSQuery parses the query of /api/v1/ws: the parameter feedIDs,
// given once, a list of stream IDs separated by commas, raw or encoded as
// %2C. It returns the IDs in lowercase, in their order, without
// duplicates. Other parameters are ignored.
func parseWSQuery(rawQuery string) ([]string, error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, wsQueryError("malformed query: " + truncate(err.Error()))
	}
	vs := q["feedIDs"]
	switch {
	case len(vs) == 0 || (len(vs) == 1 && vs[0] == ""):
		return nil, wsQueryError("missing parameter feedIDs: a comma-separated list of stream IDs")
	case len(vs) > 1:
		return nil, wsQueryError("parameter feedIDs given more than once")
	}
	var ids []string
	seen := map[[32]byte]bool{}
	for item := range strings.SplitSeq(vs[0], ",") {
		id, ok := streamID(item)
		if !ok {
			return nil, wsQueryError("malformed parameter feedIDs: want 0x and 64 hex digits, got " + strconv.Quote(truncate(item)))
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, "0x"+hex.EncodeToString(id[:]))
		}
	}
	return ids, nil
}

// wsTargets returns the strings a WebSocket upgrade may have signed: the
// request target as received, then /api/v1/ws? and the raw query (the
// Rust client's form, whatever its URL's path).
func wsTargets(r *http.Request) (target, alt string) {
	target = r.RequestURI
	if target == "" {
		target = r.URL.RequestURI()
	}
	return target, EndpointWS + "?" + r.URL.RawQuery
}

// ws serves /api/v1/ws: every check before the upgrade, then the stream of
// report frames until the connection ends.
func (h *apiHandler) ws(w *countingWriter, r *http.Request) {
	s := h.s
	if status := s.faults.cur.Load().WSRefuse; status != 0 {
		if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		writeError(w, status, http.StatusText(status)+" (injected fault)", false)
		return
	}
	target, alt := wsTargets(r)
	k, ok := h.verify(w, r, false, target, alt)
	if !ok {
		return
	}
	ids, err := parseWSQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), false)
		return
	}
	streams := make([]*stream, len(ids))
	for i, id := range ids {
		st := h.n.byID[id]
		if st == nil || !k.mayRead(st) {
			writeError(w, http.StatusUnauthorized, "unauthorized: the stream "+id+" does not exist or this key may not read it", false)
			return
		}
		streams[i] = st
	}
	if !wsupgrade.Requested(r) {
		w.Header().Set("Upgrade", "websocket")
		writeError(w, http.StatusUpgradeRequired, "this endpoint is a WebSocket: send Connection: Upgrade and Upgrade: websocket", false)
		return
	}
	origin := ""
	if len(s.haOrigins) > 0 {
		origin = r.Header.Get(OriginHeader)
		if origin != "" && !slices.Contains(s.haOrigins, origin) {
			writeError(w, http.StatusBadRequest, "unknown origin "+strconv.Quote(truncate(origin))+" in "+OriginHeader+": want one of "+s.originsHV, false)
			return
		}
	}
	slot := wsCountKey{h.n.name, k.ID}
	if !s.ws.reserve(slot) {
		writeError(w, http.StatusTooManyRequests, "too many WebSocket connections for this key: at most "+strconv.Itoa(s.ws.maxPerKey), false)
		return
	}

	// The watermarks are taken before the 101 goes out: the connection
	// gets every report published after the client saw it open.
	wc := &wsConn{s: s, n: h.n, key: k.ID, origin: origin, streams: streams,
		last: make([]int64, len(streams)), drop: make(chan struct{})}
	now := s.now().Unix()
	for i, st := range streams {
		_, wc.last[i] = st.window(now, s.history)
	}
	// The connection is counted and can be dropped before the 101 goes
	// out: a client that saw it open finds it in the counters and DropWS.
	s.counters.addWS(h.n.name, k.ID, 1, 0, 0, 0)
	s.counters.addOpen(h.n.name, k.ID, 1)
	s.ws.mu.Lock()
	s.ws.conns[wc] = struct{}{}
	s.ws.mu.Unlock()
	defer func() {
		s.ws.mu.Lock()
		delete(s.ws.conns, wc)
		s.ws.mu.Unlock()
		// The slot is free before the gauge shows the connection gone.
		s.ws.release(slot)
		s.counters.addOpen(h.n.name, k.ID, -1)
	}()
	c, err := websocket.Accept(&hijackWriter{ResponseWriter: w, ws: &s.ws, origin: origin}, r,
		&websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		s.counters.addWS(h.n.name, k.ID, -1, 0, 0, 0) // answered with an error: refused
		return
	}
	wc.conn = c
	wc.run(c.CloseRead(context.Background()))
}

// wsConn is one WebSocket connection: the streams it asked for and, per
// stream, the timestamp of the last report sent.
type wsConn struct {
	s       *Simulator
	n       *network
	key     string
	origin  string
	streams []*stream
	last    []int64
	conn    *websocket.Conn

	drop     chan struct{} // closed by DropWS
	dropOnce sync.Once
	abrupt   bool // set before drop is closed
	pinging  atomic.Bool
}

// run sends the reports of each second until the connection ends. ctx is
// the connection's read context: it ends when the client goes away.
func (wc *wsConn) run(ctx context.Context) {
	s := wc.s
	var tick <-chan time.Time
	var aligned *time.Timer
	if s.ws.tick > 0 {
		t := time.NewTicker(s.ws.tick)
		defer t.Stop()
		tick = t.C
	} else {
		aligned = time.NewTimer(untilNextSecond(s.now()))
		defer aligned.Stop()
		tick = aligned.C
	}
	var ping <-chan time.Time
	if s.ws.pingEvery > 0 {
		t := time.NewTicker(s.ws.pingEvery)
		defer t.Stop()
		ping = t.C
	}
	for {
		select {
		case <-ctx.Done():
			wc.conn.CloseNow()
			return
		case <-wc.drop:
			s.counters.addWS(wc.n.name, wc.key, 0, 0, 0, 1)
			if wc.abrupt {
				wc.conn.CloseNow()
			} else {
				wc.conn.Close(websocket.StatusGoingAway, "dropped (injected fault)")
			}
			return
		case <-s.closed:
			wc.conn.Close(websocket.StatusGoingAway, "simulator shutting down")
			return
		case <-ping:
			if s.ws.stalled(wc.origin) == nil && wc.pinging.CompareAndSwap(false, true) {
				go wc.ping()
			}
		case <-tick:
			if aligned != nil {
				aligned.Reset(untilNextSecond(s.now()))
			}
			if err := wc.send(); err != nil {
				wc.conn.CloseNow()
				return
			}
		}
	}
}

// untilNextSecond is the wait from now until just after its next whole
// second.
func untilNextSecond(now time.Time) time.Duration {
	return now.Truncate(time.Second).Add(time.Second + wsTickLag).Sub(now)
}

// send writes the reports published since the last tick, one binary frame
// each, in the order of the streams in the URL and, per stream, of time.
// A stall stops it where it is; the rest follows when the stall ends.
func (wc *wsConn) send() error {
	s := wc.s
	if s.ws.stalled(wc.origin) != nil {
		return nil
	}
	now := s.now().Unix()
	ctx, cancel := context.WithTimeout(context.Background(), s.ws.writeTimeout)
	defer cancel()
	b := getBuf()
	defer putBuf(b)
	var frames int64
	defer func() {
		if frames > 0 {
			s.counters.addWS(wc.n.name, wc.key, 0, 0, frames, 0)
		}
	}()
	for i, st := range wc.streams {
		first, last := st.window(now, s.history)
		for ts := max(wc.last[i]+1, last-wsMaxCatchUp+1, first); ts <= last; ts++ {
			if s.ws.stalled(wc.origin) != nil {
				return nil
			}
			*b = append((*b)[:0], `{"report":`...)
			*b = s.appendReport(*b, wc.n, st, ts)
			*b = append(*b, '}')
			if err := wc.conn.Write(ctx, websocket.MessageBinary, *b); err != nil {
				return err
			}
			wc.last[i] = ts
			frames++
		}
	}
	return nil
}

// ping pings the client and closes the connection when no pong comes in
// time, unless a stall (which holds the pong back) began meanwhile.
func (wc *wsConn) ping() {
	defer wc.pinging.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), wc.s.ws.pongWait)
	defer cancel()
	if err := wc.conn.Ping(ctx); err != nil && wc.s.ws.stalled(wc.origin) == nil {
		wc.conn.CloseNow()
	}
}

// hijackWriter hands the WebSocket library a connection that the stall
// fault can hold.
type hijackWriter struct {
	http.ResponseWriter
	ws     *wsState
	origin string
}

func (w *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	sc := &stallConn{Conn: nc, ws: w.ws, origin: w.origin, closed: make(chan struct{})}
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		sc.pending = bytes.Clone(b)
	}
	brw.Reader.Reset(sc)
	if err := brw.Writer.Flush(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	brw.Writer.Reset(sc)
	return sc, brw, nil
}

// stallConn is a net.Conn that neither reads nor writes while a stall
// holds its origin. Bytes that arrive meanwhile are held until it ends.
type stallConn struct {
	net.Conn
	ws        *wsState
	origin    string
	pending   []byte // read before the hijack; used by the single reader
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *stallConn) Read(p []byte) (int, error) {
	if !c.ws.waitStall(c.origin, c.closed) {
		return 0, net.ErrClosed
	}
	var n int
	var err error
	if len(c.pending) > 0 {
		n = copy(p, c.pending)
		c.pending = c.pending[n:]
	} else {
		n, err = c.Conn.Read(p)
	}
	if n > 0 && !c.ws.waitStall(c.origin, c.closed) {
		return 0, net.ErrClosed
	}
	return n, err
}

func (c *stallConn) Write(p []byte) (int, error) {
	if !c.ws.waitStall(c.origin, c.closed) {
		return 0, net.ErrClosed
	}
	return c.Conn.Write(p)
}

func (c *stallConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// validateOrigins checks Config.HAOrigins: names without commas, braces or
// spaces (the header lists them in braces, separated by commas), unique.
func validateOrigins(origins []string) error {
	var errs []error
	for i, o := range origins {
		if o == "" || strings.ContainsAny(o, ",{} \t\r\n") {
			errs = append(errs, fmt.Errorf("simulator: HA origin %d (%q) must be non-empty, without commas, braces or spaces", i, o))
		} else if slices.Contains(origins[:i], o) {
			errs = append(errs, fmt.Errorf("simulator: duplicate HA origin %q", o))
		}
	}
	return errors.Join(errs...)
}
