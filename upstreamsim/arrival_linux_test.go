package upstreamsim

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"streamgate/auth"
)

// gatedListener accepts its first connection at once and the next ones
// only once open is closed: they and the requests sent on them wait in
// the kernel meanwhile, as they wait for a busy process to get round to
// them.
type gatedListener struct {
	net.Listener
	open     chan struct{}
	accepted atomic.Int32
}

func (l *gatedListener) Accept() (net.Conn, error) {
	if l.accepted.Add(1) > 1 {
		<-l.open
	}
	return l.Listener.Accept()
}

// TestRateLimitCountsArrival: on the wall clock, a server prepared by
// CountArrivals counts a request at the time its bytes reached the host,
// not when the simulator got round to it. The first request is written
// and only then accepted and handled (its connection waits in the
// kernel, as on a busy machine); a second one, refused, shows the
// first's count time: between the start and the end of its write, before
// the handler could run.
func TestRateLimitCountsArrival(t *testing.T) {
	sim := newTestSim(t, func(c *Config) {
		c.Now = nil
		c.RateLimit, c.RateMode, c.Burst = rate.Limit(0.001), RateBucket, 1 // the second call is refused
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gate := &gatedListener{Listener: l, open: make(chan struct{})}
	srv := &http.Server{Handler: sim.Handler(Mainnet), ReadHeaderTimeout: 10 * time.Second}

	// The kernel turns its receive times on for every socket a moment
	// after the first asks: the first connection asks for requests
	// that do not count until one has its time.
	var warm atomic.Pointer[arrivalConn]
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if ac, ok := c.(*arrivalConn); ok {
			warm.CompareAndSwap(nil, ac)
		}
		return ctx
	}
	served := CountArrivals(srv, gate)
	go func() { _ = srv.Serve(served) }()
	t.Cleanup(func() { srv.Close() })
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	require.Eventually(t, func() bool {
		resp, err := hc.Get("http://" + l.Addr().String() + "/")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		ac := warm.Load()
		require.NotNil(t, ac, "the connection records receive times")
		return ac.last.Load() != 0
	}, 10*time.Second, time.Millisecond, "receive times")

	conn, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second))) // a bound on a failure
	br := bufio.NewReader(conn)
	target := "/api/v1/reports/latest?feedID=" + findStream(t, sim, Mainnet, nameETH)
	var opened sync.Once
	call := func() (*http.Response, time.Time, time.Time) {
		req, err := http.NewRequest(http.MethodGet, "http://"+l.Addr().String()+target, nil)
		require.NoError(t, err)
		auth.Sign(req, OrgKeyID, []byte(OrgKeySecret), time.Now())
		before := time.Now()
		require.NoError(t, req.Write(conn))
		written := time.Now()
		opened.Do(func() { close(gate.open) }) // accepted, read and handled after the write
		resp, err := http.ReadResponse(br, req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp, before, written
	}
	first, before, written := call()
	require.Equal(t, http.StatusOK, first.StatusCode)
	second, _, _ := call()
	require.Equal(t, http.StatusTooManyRequests, second.StatusCode)

	refusals := sim.RateRefusals()
	require.Len(t, refusals, 1)
	r := refusals[0]
	require.Len(t, r.Accepted, 1)
	at := r.Accepted[0]
	assert.False(t, at.Before(before) || at.After(written),
		"the first call counted at %v, written between %v and %v", at.Format(time.StampMicro), before.Format(time.StampMicro), written.Format(time.StampMicro))
	assert.False(t, r.Handled.Before(r.At), "handled %v, arrived %v", r.Handled, r.At)
}
