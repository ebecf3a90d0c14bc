package upstreamsim

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Counting a request when it arrived.
//
// The rate limit counts a request at the time it reached the service, as
// an upstream's front counts it: the time its bytes came in from the
// network. A simulator that read its own clock when its handler ran would
// count the time it got round to the request instead, which on a busy
// machine is up to a few hundred milliseconds later and differs from one
// request to the next: two requests sent 120 ms apart would count as
// 20 ms apart when the first waited for a CPU and the second did not,
// although no network delayed either. CountArrivals makes a server's
// connections record the kernel's receive time of the bytes they read
// (Linux: SO_TIMESTAMPNS_NEW), and the rate limit counts that time when
// the simulator runs on the wall clock (Config.Now nil). Elsewhere, or
// on a test clock, it counts Now when the handler runs.

// CountArrivals prepares srv to serve l so that the simulator's handlers
// count each request at the time its bytes reached this host: it returns
// the listener to serve, whose connections record the kernel's receive
// time of what they read, and sets srv.ConnContext (keeping one set
// before) to hand them to the handlers. Where the kernel gives no receive
// times, the connections are l's own and the handlers count their Now.
func CountArrivals(srv *http.Server, l net.Listener) net.Listener {
	prev := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prev != nil {
			ctx = prev(ctx, c)
		}
		if ac, ok := c.(*arrivalConn); ok {
			ctx = context.WithValue(ctx, arrivalKey{}, &ac.last)
		}
		return ctx
	}
	stampArrivals(l)
	return &arrivalListener{Listener: l}
}

type arrivalKey struct{}

// arrivedAt returns the receive time of the last bytes read from ctx's
// connection (that of the request being handled: a client sends the next
// one only after the answer), if the connection records it.
func arrivedAt(ctx context.Context) (time.Time, bool) {
	last, _ := ctx.Value(arrivalKey{}).(*atomic.Int64)
	if last == nil {
		return time.Time{}, false
	}
	ns := last.Load()
	if ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// arrivalListener wraps the connections it accepts in arrivalConn when
// they can record receive times.
type arrivalListener struct {
	net.Listener
}

func (l *arrivalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if ac := newArrivalConn(c); ac != nil {
		return ac, nil
	}
	return c, nil
}

// countAt is the time a request of r counts at: when it arrived, if its
// connection recorded it and the simulator runs on the wall clock, else
// Now.
func (h *apiHandler) countAt(r *http.Request) time.Time {
	s := h.s
	if s.wallClock {
		if at, ok := arrivedAt(r.Context()); ok {
			return at
		}
	}
	return s.now()
}
