package wsgate

import (
	"bufio"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"golang.org/x/time/rate"

	"streamgate/don"
	"streamgate/realtime"
)

// The client side of the stream at the frame level.
//
// All of a second's reports arrive at once (every stream publishes on the
// second), so a client's frames come in bursts. Each burst is written to
// the client in one write: the frames queued for it when its writer wakes,
// each in a binary frame of its own, in one buffer. One write per burst
// instead of one per frame is what keeps a burst's last client close to its
// first (writing is most of the gateway's cost per frame). A library that
// flushes each message on its own cannot batch, so the server side of the
// protocol is written here on github.com/gobwas/ws's frame codec.

const (
	// wsMaxBatch bounds one write: frames, and bytes.
	wsMaxBatch      = 64
	wsMaxBatchBytes = 256 << 10
	// wsReadLimit bounds a client's frame: clients send nothing but control
	// frames, whose payload is at most 125 bytes.
	wsReadLimit = 4096
	// wsCloseWait is how long a closing connection waits for the client's
	// close frame before it is cut.
	wsCloseWait = 2 * time.Second
	// wsFrameRate and wsFrameBurst bound the frames a client may send
	// (pings, pongs, anything): a client keeps a connection alive with a
	// few a minute; one that sends more than this is closed (1008) rather
	// than answered without end.
	wsFrameRate  = 10 // a second
	wsFrameBurst = 50
	// wsDeadlineRefresh: a connection's write deadline is set again only
	// once it is this much nearer than wsWriteTimeout, not at every
	// write (setting it moves a runtime timer; a client is written to
	// once or twice a second). So every write ends within wsWriteTimeout
	// of its start, as before, and has at least wsWriteTimeout minus this
	// (7 s) to complete.
	wsDeadlineRefresh = 3 * time.Second
)

// errFrameFlood ends the read loop of a client over wsFrameRate.
var errFrameFlood = errors.New("too many frames from the client: at most 10 a second")

// wsBuffers holds the buffers of batched writes between uses, so that an
// idle client holds none.
var wsBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// wsConn is one client's upgraded connection: its writes (data from the
// serving loop, pongs and close replies from the read loop) are serialised
// by mu.
type wsConn struct {
	conn net.Conn
	mu   sync.Mutex
	// closing is set once the gateway sends its close frame: a close frame
	// from the client afterwards is its reply, not its own close.
	closing atomic.Bool
	// ponged is set by the read loop for each pong; the writer takes it
	// at each ping.
	ponged atomic.Bool
	// deadline is the write deadline set last (mu); timeout, if not 0,
	// stands for wsWriteTimeout (tests).
	deadline time.Time
	timeout  time.Duration
}

// Write writes p whole under the write lock, bounded by wsWriteTimeout (a
// write ends within it of its start, and has at least wsWriteTimeout -
// wsDeadlineRefresh); the read loop's control replies go through it.
func (c *wsConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	timeout, refresh := wsWriteTimeout, wsDeadlineRefresh
	if c.timeout > 0 {
		timeout, refresh = c.timeout, c.timeout*wsDeadlineRefresh/wsWriteTimeout
	}
	if now := time.Now(); c.deadline.Sub(now) < timeout-refresh {
		c.deadline = now.Add(timeout)
		if err := c.conn.SetWriteDeadline(c.deadline); err != nil {
			return 0, err
		}
	}
	return c.conn.Write(p)
}

// writeBatch writes frames, each as one frame of op (binary for the
// upstream's frames, text for the decoded view), in one write; with ping,
// a ping follows them in the same write (a control frame may come between
// messages).
func (c *wsConn) writeBatch(frames [][]byte, op ws.OpCode, ping bool) error {
	bp := wsBuffers.Get().(*[]byte)
	b := (*bp)[:0]
	for _, f := range frames {
		b = appendFrameHeader(b, op, len(f))
		b = append(b, f...)
	}
	if ping {
		b = appendFrameHeader(b, ws.OpPing, 0)
	}
	_, err := c.Write(b)
	if cap(b) <= wsMaxBatchBytes+64<<10 {
		*bp = b[:0]
		wsBuffers.Put(bp)
	}
	return err
}

// appendFrameHeader appends the header of a final, unmasked (server) frame
// of op with n bytes of payload (RFC 6455 section 5.2).
func appendFrameHeader(b []byte, op ws.OpCode, n int) []byte {
	b = append(b, 0x80|byte(op))
	switch {
	case n <= 125:
		return append(b, byte(n))
	case n <= 0xffff:
		return append(b, 126, byte(n>>8), byte(n))
	default:
		return append(b, 127, byte(n>>56), byte(n>>48), byte(n>>40), byte(n>>32), byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// writeControl writes one control frame (ping or close; payload ≤ 125).
func (c *wsConn) writeControl(op ws.OpCode, payload []byte) error {
	b := appendFrameHeader(make([]byte, 0, 2+len(payload)), op, len(payload))
	_, err := c.Write(append(b, payload...))
	return err
}

// closeWith sends a close frame with code and reason, then waits for the
// client's (the read loop ending, readDone) for at most wsCloseWait.
func (c *wsConn) closeWith(code ws.StatusCode, reason string, readDone <-chan error) {
	c.closing.Store(true)
	if c.writeControl(ws.OpClose, ws.NewCloseFrameBody(code, reason)) != nil {
		return
	}
	select {
	case <-readDone:
	case <-time.After(wsCloseWait):
	}
}

// readLoop reads the client's frames until the connection ends: it answers
// pings and close frames (through c, so never in the middle of a batch),
// marks pongs (c.ponged), and drops data frames, which clients do not
// send. It returns the error that ended the connection
// (wsutil.ClosedError for a close frame from the client).
func (c *wsConn) readLoop(src io.Reader) error {
	rd := &wsutil.Reader{Source: src, State: ws.StateServerSide, MaxFrameSize: wsReadLimit}
	ctl := wsutil.ControlHandler{Src: rd, Dst: c, State: ws.StateServerSide, DisableSrcCiphering: true}
	budget := rate.NewLimiter(wsFrameRate, wsFrameBurst)
	rd.OnIntermediate = func(h ws.Header, _ io.Reader) error {
		// A control frame between the fragments of a message.
		if !budget.Allow() {
			return errFrameFlood
		}
		if h.OpCode == ws.OpPong {
			c.ponged.Store(true)
		}
		return ctl.Handle(h)
	}
	for {
		h, err := rd.NextFrame()
		if err != nil {
			return err
		}
		if !budget.Allow() {
			return errFrameFlood
		}
		if h.OpCode.IsControl() {
			if h.OpCode == ws.OpPong {
				c.ponged.Store(true)
			}
			if err := ctl.Handle(h); err != nil {
				return err
			}
			continue
		}
		if err := rd.Discard(); err != nil {
			return err
		}
	}
}

func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// errShutdown ends a subscription's loop when its channel closes without
// ErrSlowConsumer.
var errShutdown = errors.New("the gateway is shutting down")

// serveStream runs an upgraded client until it or the gateway ends it,
// writing each batch of sub's frames in one write, pinging every ping
// interval and closing a client that has not answered the previous ping.
// It returns the reason for the close metric.
//
// A reason in wc.revoked (a reload took the connection's right away)
// closes it with 1008 and that reason. Frames of a stream the reload stopped
// (Subscription.Keep) are not written.
//
// With decoded, each frame goes out as the decoded view of its report, one
// text frame per report, instead of the upstream's binary frame.
//
// wc.mark, if not nil, records the watermark of every stream written
// (resume); wc.draining closes the client with 1001 (the gateway shuts
// down, DrainStreams).
//
// The writer waits on two channels, the frames and wc.ctl, as a bare
// fan-out's writer waits on its queue and its client's end: a waiter
// locks and queues itself on every channel of its select each time it
// sleeps and wakes, once per batch, which made the select the writer's
// largest cost beside the write. Everything else is a flag behind ctl's
// signal: the read loop's end (readDone), the ping (pinger, wsping.go: a
// ping due soon goes with a batch instead), the drain (wc.draining) and
// the revocation (wc.revoked); a pong is a flag too (wsConn.ponged).
func (n *Network) serveStream(conn net.Conn, br *bufio.Reader, sub *realtime.Subscription, wc *wsClient, decoded bool) string {
	mark, ctl := wc.mark, wc.ctl
	c := &wsConn{conn: conn}
	readDone := make(chan error, 1)
	go func() {
		err := c.readLoop(br)
		var closeFrame wsutil.ClosedError
		if mark != nil && errors.As(err, &closeFrame) && !c.closing.Load() {
			mark.closedByClient.Store(true)
		}
		readDone <- err
		signal(ctl)
	}()

	pings := newPinger(n.ws.pingInterval, ctl)
	defer pings.stop()
	awaiting := false // a ping was sent: a pong must come before the next
	frames := make([]*realtime.Frame, 0, 8)
	var out [][]byte // what is written of frames: their bytes, or decoded
	for {
		select {
		case f, ok := <-sub.C():
			if !ok {
				return n.endStream(c, sub, readDone)
			}
			frames, ok = drain(append(frames[:0], f), sub.C())
			frames = slices.DeleteFunc(frames, func(f *realtime.Frame) bool { return !sub.Keep(f) })
			op := ws.OpBinary
			out = out[:0]
			for _, f := range frames {
				out = append(out, f.Bytes)
			}
			if decoded {
				op = ws.OpText
				for i, f := range frames {
					if d, err := don.DecodedBody(f.Bytes, n.gate.Verification); err == nil {
						out[i] = d[:len(d)-1] // without the newline
					}
				}
			}
			var err error
			if len(frames) > 0 {
				// The period's ping goes with the batch when the timer has
				// fired, or fires within pingRide and the last ping was
				// answered (pinger): one write instead of two.
				ping := false
				switch {
				case pings.takeDue():
					if ponged := c.ponged.Swap(false); awaiting && !ponged {
						c.closeWith(ws.StatusPolicyViolation, "no pong within the ping interval", readDone)
						return "ping"
					}
					ping = true
				case (!awaiting || c.ponged.Load()) && pings.takeAhead(time.Now()):
					c.ponged.Store(false)
					ping = true
				}
				awaiting = awaiting || ping
				err = c.writeBatch(out, op, ping)
				if err == nil && mark != nil {
					mark.written(frames)
				}
				if err == nil && n.usage != nil {
					n.usage.Frames(wc.network, wc.team, len(frames), batchBytes(out))
				}
			}
			clear(frames) // hold no frame while waiting
			clear(out)
			if err != nil {
				return "write"
			}
			if !ok {
				return n.endStream(c, sub, readDone)
			}
		case <-ctl:
			select {
			case err := <-readDone:
				if errors.Is(err, errFrameFlood) {
					c.closeWith(ws.StatusPolicyViolation, errFrameFlood.Error(), closedDone)
					return "flood"
				}
				return "client"
			default:
			}
			if reason := wc.revoked.Load(); reason != nil {
				c.closeWith(ws.StatusPolicyViolation, *reason, readDone)
				return "revoked"
			}
			if wc.draining.Load() {
				c.closeWith(ws.StatusGoingAway, reasonDrain, readDone)
				return "drain"
			}
			if !pings.takeDue() {
				continue // nothing due, or the ping went with a batch
			}
			if ponged := c.ponged.Swap(false); awaiting && !ponged {
				c.closeWith(ws.StatusPolicyViolation, "no pong within the ping interval", readDone)
				return "ping"
			}
			awaiting = true
			if c.writeControl(ws.OpPing, nil) != nil {
				return "write"
			}
		}
	}
}

// closedDone stands for a read loop that has ended already.
var closedDone = func() <-chan error { ch := make(chan error); close(ch); return ch }()

// drain appends to frames what else is queued in ch now, up to one batch.
// ok is false when ch was found closed.
func drain(frames []*realtime.Frame, ch <-chan *realtime.Frame) ([]*realtime.Frame, bool) {
	size := len(frames[0].Bytes)
	for len(frames) < wsMaxBatch && size < wsMaxBatchBytes {
		select {
		case f, ok := <-ch:
			if !ok {
				return frames, false
			}
			frames = append(frames, f)
			size += len(f.Bytes)
		default:
			return frames, true
		}
	}
	return frames, true
}

// endStream closes a client whose subscription the hub ended: too slow, or
// the gateway shutting down.
func (n *Network) endStream(c *wsConn, sub *realtime.Subscription, readDone <-chan error) string {
	if errors.Is(sub.Err(), realtime.ErrSlowConsumer) {
		c.closeWith(ws.StatusPolicyViolation, "slow consumer: frames were not read fast enough", readDone)
		return "slow"
	}
	c.closeWith(ws.StatusGoingAway, errShutdown.Error(), readDone)
	return "shutdown"
}
