package realtime

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap"

	"streamgate/auth"
)

// The states of an upstream connection (metric label state).
const (
	stateConnecting = "connecting"
	stateUp         = "up"
	stateDown       = "down" // waiting to reconnect
)

// The reasons of a reconnect (metric label reason).
const (
	reasonDrop    = "drop"
	reasonStall   = "stall"
	reasonRefused = "refused"
)

// link keeps one upstream connection for a fixed feed list and origin: it
// dials, reads, pings, and reconnects with backoff until retired.
type link struct {
	u      *upstream
	origin string // "" without HA
	feeds  []string
	target string // /api/v1/ws?feedIDs=a,b: the request target, as signed
	tag    string // the shared chunk whose frames it publishes; "" none

	ctx    context.Context
	cancel context.CancelFunc

	state     atomic.Pointer[string]
	sess      atomic.Pointer[session] // the newest connection's session
	first     chan struct{}           // closed at the first frame
	firstOnce sync.Once
}

// session is one connection's life, for Latest: valid while the
// connection is up, or while the connection that replaced it
// make-before-break is.
type session struct {
	id    uint64 // numbers the hub's own sessions in shared heartbeats
	alive atomic.Bool
	next  atomic.Pointer[session]
}

// Valid reports whether the session, or the chain of its make-before-break
// successors, is up.
func (s *session) Valid() bool {
	for i := 0; s != nil && i < 8; i++ {
		if s.alive.Load() {
			return true
		}
		s = s.next.Load()
	}
	return false
}

// startLink starts a link's goroutine; tag names the shared chunk whose
// frames it publishes ("" none).
func (u *upstream) startLink(origin string, feeds []string, tag string) *link {
	l := &link{u: u, origin: origin, feeds: feeds, tag: tag, first: make(chan struct{}),
		target: wsPath + "?feedIDs=" + strings.Join(feeds, ",")}
	l.ctx, l.cancel = context.WithCancel(u.ctx)
	u.linkMu.Lock()
	u.links[l] = struct{}{}
	u.linkMu.Unlock()
	u.wg.Add(1)
	go l.run()
	return l
}

// retire closes the link; when succ is up, the Latest answers the link
// delivered stay valid while succ stays up.
func (l *link) retire(succ *link) {
	if cur := l.sess.Load(); cur != nil && succ != nil {
		if ss := succ.sess.Load(); ss != nil && ss.alive.Load() {
			cur.next.Store(ss)
		}
	}
	l.cancel()
}

func (l *link) setState(s *string) {
	old := l.state.Swap(s)
	if old != nil {
		l.u.mx.conns(l.origin, *old).Dec()
	}
	if s != nil {
		l.u.mx.conns(l.origin, *s).Inc()
	}
}

var (
	pConnecting = ptr(stateConnecting)
	pUp         = ptr(stateUp)
	pDown       = ptr(stateDown)
)

func ptr(s string) *string { return &s }

func (l *link) run() {
	u := l.u
	defer u.wg.Done()
	defer func() {
		l.setState(nil)
		u.health.gone(l)
		u.linkMu.Lock()
		delete(u.links, l)
		u.linkMu.Unlock()
		// Room for a switch or a chunk that waited for it (see room).
		u.kick()
	}()
	for attempt := 0; ; attempt++ {
		l.setState(pConnecting)
		c, err := l.dial()
		if err != nil {
			if l.ctx.Err() != nil {
				return
			}
			u.reconnected(reasonRefused)
			u.health.failed(l, false, zap.Error(err), zap.Int("attempt", attempt+1))
		} else {
			u.health.up(l)
			sess := &session{id: u.sessN.Add(1)}
			sess.alive.Store(true)
			l.sess.Store(sess)
			l.setState(pUp)
			frames, reason := l.serve(c, sess)
			sess.alive.Store(false)
			if l.tag != "" {
				u.peers.SessionDown(l.tag, sess.id)
			}
			c.CloseNow()
			if l.ctx.Err() != nil {
				return
			}
			u.reconnected(reason)
			u.health.failed(l, true, zap.String("reason", reason), zap.Int64("frames", frames))
			if frames > 0 {
				attempt = 0
			}
		}
		l.setState(pDown)
		t := time.NewTimer(backoff(attempt))
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// dial opens the connection, signed over the exact request target.
func (l *link) dial() (*websocket.Conn, error) {
	req, err := l.u.upgradeRequest(l.target, l.origin)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(l.ctx, dialTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, req.URL.String(), &websocket.DialOptions{
		HTTPHeader:      req.Header,
		CompressionMode: websocket.CompressionDisabled,
	})
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return c, err
}

// upgradeRequest returns the upgrade request of target (path and query,
// raw commas) and origin, signed over target exactly as it goes on the
// wire (coder/websocket sends the URL's RequestURI unchanged).
func (u *upstream) upgradeRequest(target, origin string) (*http.Request, error) {
	req, err := http.NewRequest(http.MethodGet, u.base+target, nil)
	if err != nil {
		return nil, err
	}
	if req.URL.RequestURI() != target {
		return nil, errors.New("realtime: the request target would not go on the wire as signed")
	}
	auth.Sign(req, u.cfg.APIKey, u.cfg.Secret, u.cfg.Clock.Now())
	if origin != "" {
		req.Header.Set(headerOrigin, origin)
	}
	return req, nil
}

// retireCloseWait bounds the close handshake of a retired connection.
const retireCloseWait = time.Second

// serve reads frames until the connection ends, and pings: a connection
// without frame or pong for StallTimeout is closed as stalled. It returns
// the frames read and why it ended.
func (l *link) serve(c *websocket.Conn, sess *session) (frames int64, reason string) {
	u := l.u
	stall := u.cfg.StallTimeout
	start := time.Now()
	var last atomic.Int64 // since start, at the last frame or pong
	var stalled atomic.Bool
	pctx, pcancel := context.WithCancel(l.ctx)
	pingDone := make(chan struct{})
	go func() {
		defer close(pingDone)
		t := time.NewTicker(max(stall/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			if time.Since(start)-time.Duration(last.Load()) > stall {
				stalled.Store(true)
				c.CloseNow()
				return
			}
			ctx, cancel := context.WithTimeout(pctx, max(stall/3, time.Millisecond))
			if c.Ping(ctx) == nil {
				last.Store(int64(time.Since(start)))
			}
			cancel()
		}
	}()
	defer func() {
		pcancel()
		<-pingDone
		if stalled.Load() {
			reason = reasonStall
		}
	}()
	// Retired (l.ctx ends): close with the handshake, so that the
	// upstream has let the connection go when the link ends and a
	// successor is dialled (its per-key count and the hub's budget
	// agree); bounded by retireCloseWait.
	readEnded := make(chan struct{})
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		select {
		case <-readEnded:
			return
		case <-l.ctx.Done():
		}
		t := time.AfterFunc(retireCloseWait, func() { c.CloseNow() })
		defer t.Stop()
		c.Close(websocket.StatusNormalClosure, "")
	}()
	defer func() {
		close(readEnded)
		<-closed
	}()
	var buf bytes.Buffer
	for {
		typ, r, err := c.Reader(context.Background())
		if err == nil {
			buf.Reset()
			_, err = buf.ReadFrom(r)
		}
		if err != nil {
			return frames, reasonDrop
		}
		last.Store(int64(time.Since(start)))
		if typ != websocket.MessageBinary {
			continue
		}
		frames++
		u.deliver(l, sess, bytes.Clone(buf.Bytes()))
		l.firstOnce.Do(func() { close(l.first) })
	}
}

// deliver takes one frame read by l: it is published to the other
// replicas when l carries a shared chunk, and handed to the hub.
func (u *upstream) deliver(l *link, sess *session, frame []byte) {
	u.mx.frameIn(l.origin)
	if l.tag != "" {
		u.peers.Publish(l.tag, sess.id, frame)
	}
	u.frames(l.origin, sess, frame)
}
