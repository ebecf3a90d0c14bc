// Package balancer is a small TCP load balancer that routes by readiness,
// as a Kubernetes Service does: it polls each backend's readiness URL
// (/readyz) and hands each new connection to the next ready backend, round
// robin. A backend that turns not-ready gets no new connections; the
// connections it has stay until either side closes them. A backend that
// dies between two polls may still be picked until the next poll: a
// connection handed to it fails, as it would behind a Service.
//
// It is used by the multi-process tests and the continuity bench to put
// several gateway replicas behind one address.
package balancer

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Backend is one replica: the address that serves the traffic and the URL
// whose 200 says that it is ready.
type Backend struct {
	Addr  string // host:port of the traffic
	Ready string // readiness URL, e.g. http://127.0.0.1:9090/readyz
}

// Options tune a Balancer; zero values take the defaults.
type Options struct {
	// Interval is the time between two polls of a backend's readiness
	// (default 100ms).
	Interval time.Duration
	// Timeout bounds one poll and one dial to a backend (default 1s).
	Timeout time.Duration
}

// Balancer accepts connections on one listener and relays each to a ready
// backend.
type Balancer struct {
	ln   net.Listener
	opts Options
	hc   *http.Client

	mu       sync.Mutex
	backends []*backend
	next     int

	accepted, refused atomic.Int64
	conns             sync.WaitGroup
	open              sync.Map // net.Conn → struct{}: both sides of every relayed connection
	ctx               context.Context
	cancel            context.CancelFunc
	done              chan struct{}
}

type backend struct {
	Backend
	ready     atomic.Bool
	routed    atomic.Int64
	stop      chan struct{}
	firstUp   chan struct{} // closed at the first poll that answers 200
	closeOnce sync.Once
}

// Listen starts a balancer on addr (e.g. "127.0.0.1:0") in front of
// backends. Until a backend's first poll answers 200 it gets nothing.
func Listen(addr string, opts Options, backends ...Backend) (*Balancer, error) {
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Balancer{ln: ln, opts: opts, ctx: ctx, cancel: cancel, done: make(chan struct{}),
		hc: &http.Client{Timeout: opts.Timeout, Transport: &http.Transport{DisableKeepAlives: true}}}
	for _, be := range backends {
		b.Add(be)
	}
	go b.serve()
	return b, nil
}

// Addr is the address the balancer listens on.
func (b *Balancer) Addr() string { return b.ln.Addr().String() }

// Add puts a backend behind the balancer and starts polling it. The
// returned channel is closed once a poll of the backend answers 200: from
// then on the balancer routes new connections to it (until it turns not
// ready). It is never closed for a backend that is never ready.
func (b *Balancer) Add(be Backend) <-chan struct{} {
	nb := &backend{Backend: be, stop: make(chan struct{}), firstUp: make(chan struct{})}
	b.mu.Lock()
	b.backends = append(b.backends, nb)
	b.mu.Unlock()
	go b.poll(nb)
	return nb.firstUp
}

// Remove takes the backend serving addr from the balancer: no new
// connection goes to it (the open ones stay).
func (b *Balancer) Remove(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, be := range b.backends {
		if be.Addr == addr {
			close(be.stop)
			b.backends = append(b.backends[:i], b.backends[i+1:]...)
			return
		}
	}
}

// Ready returns the addresses of the backends ready at the last poll.
func (b *Balancer) Ready() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, be := range b.backends {
		if be.ready.Load() {
			out = append(out, be.Addr)
		}
	}
	return out
}

// Stats are a balancer's counts so far.
type Stats struct {
	Accepted int64            // connections accepted
	Refused  int64            // closed at once: no backend ready, or its dial failed
	Routed   map[string]int64 // connections handed to each backend (by Addr) that is still behind it
}

// Stats returns the counts so far.
func (b *Balancer) Stats() Stats {
	s := Stats{Accepted: b.accepted.Load(), Refused: b.refused.Load(), Routed: map[string]int64{}}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, be := range b.backends {
		s.Routed[be.Addr] = be.routed.Load()
	}
	return s
}

// Close stops accepting, stops polling, closes every relayed connection and
// waits for the relays to end.
func (b *Balancer) Close() error {
	err := b.ln.Close()
	b.cancel()
	<-b.done
	b.mu.Lock()
	for _, be := range b.backends {
		close(be.stop)
	}
	b.backends = nil
	b.mu.Unlock()
	b.open.Range(func(k, _ any) bool {
		k.(net.Conn).Close()
		return true
	})
	b.conns.Wait()
	return err
}

func (b *Balancer) poll(be *backend) {
	t := time.NewTicker(b.opts.Interval)
	defer t.Stop()
	for {
		ready := b.check(be.Ready)
		be.ready.Store(ready)
		if ready {
			be.closeOnce.Do(func() { close(be.firstUp) })
		}
		select {
		case <-be.stop:
			be.ready.Store(false)
			return
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check reports whether url answers 200 within the timeout.
func (b *Balancer) check(url string) bool {
	req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// pick returns the next ready backend after the last one picked, or nil.
func (b *Balancer) pick() *backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.backends)
	for i := range n {
		be := b.backends[(b.next+i)%n]
		if be.ready.Load() {
			b.next = (b.next + i + 1) % n
			return be
		}
	}
	return nil
}

func (b *Balancer) serve() {
	defer close(b.done)
	for {
		c, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		b.accepted.Add(1)
		b.conns.Add(1)
		go b.relay(c)
	}
}

// relay hands c to a ready backend and copies both ways until either side
// closes; a half-close is passed on.
func (b *Balancer) relay(c net.Conn) {
	defer b.conns.Done()
	be := b.pick()
	if be == nil {
		b.refused.Add(1)
		c.Close()
		return
	}
	d := net.Dialer{Timeout: b.opts.Timeout}
	up, err := d.DialContext(b.ctx, "tcp", be.Addr)
	if err != nil {
		b.refused.Add(1)
		c.Close()
		return
	}
	be.routed.Add(1)
	b.open.Store(c, struct{}{})
	b.open.Store(up, struct{}{})
	defer func() {
		b.open.Delete(c)
		b.open.Delete(up)
	}()
	if b.ctx.Err() != nil { // Close ran while this one was dialling
		c.Close()
		up.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok && err == nil {
			tc.CloseWrite() // the peer closed its side: pass the FIN on
			return
		}
		// An error (a reset, a closed socket) ends both sides.
		dst.Close()
		src.Close()
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
	c.Close()
	up.Close()
}
