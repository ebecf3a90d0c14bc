package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/ratelimit"
)

// gatedListener accepts connections, signals each on accepted, and holds
// it until release is closed, then relays it to target: a connect (and
// TLS handshake) that stalls as long as the test wants.
func gatedListener(t *testing.T, target string, release <-chan struct{}, accepted chan<- struct{}) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
		ended bool
		done  = make(chan struct{})
	)
	keep := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			c.Close()
			return false
		}
		conns = append(conns, c)
		return true
	}
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		ended = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		close(done)
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil || !keep(c) {
				return
			}
			select {
			case accepted <- struct{}{}:
			default:
			}
			wg.Go(func() {
				select {
				case <-release:
				case <-done:
					return
				}
				up, err := net.Dial("tcp", target)
				if err != nil || !keep(up) {
					c.Close()
					return
				}
				wg.Go(func() {
					io.Copy(up, c)
					up.Close()
				})
				io.Copy(c, up)
				c.Close()
			})
		}
	})
	return l.Addr().String()
}

// TestSlowConnectStepsOutAndRejoins: a call whose connection is not ready
// within the key's interval lets the next call of the key go (before, it
// held the key until its request was written, so the next call waited for
// its connect); when its connection comes after all, its request is
// written no sooner than the interval after the write of the call that
// went meanwhile.
func TestSlowConnectStepsOutAndRejoins(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		name := "HTTP/1.1"
		if h2 {
			name = "HTTP/2"
		}
		t.Run(name, func(t *testing.T) { testSlowConnectStepsOutAndRejoins(t, h2) })
	}
}

func testSlowConnectStepsOutAndRejoins(t *testing.T, h2 bool) {
	var (
		mu      sync.Mutex
		arrived time.Time
		proto   string
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived, proto = time.Now(), r.Proto
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	srv.EnableHTTP2 = h2
	srv.StartTLS()
	t.Cleanup(srv.Close)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	accepted := make(chan struct{}, 16)
	base, err := url.Parse("https://" + gatedListener(t, srv.Listener.Addr().String(), release, accepted))
	require.NoError(t, err)
	budget, err := ratelimit.NewMemoryBudget(ratelimit.Options{Network: "n"})
	require.NoError(t, err)
	limit := ratelimit.Limit{Rate: 10, Burst: 1}
	u := &upstream{network: "n", base: base, client: srv.Client(), timeout: 30 * time.Second,
		budget: budget, limit: limit}

	slow := make(chan error, 1)
	go func() {
		resp, err := u.get(context.Background(), "latest", "/api/v1/reports/latest", nil)
		if err == nil && resp.status != http.StatusOK {
			err = assert.AnError
		}
		slow <- err
	}()
	// The slow call is let go, and stalls connecting: the next call of
	// the key is let go all the same, well within the slow call's
	// timeout.
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow call did not connect")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sent, err := budget.Depart(ctx, budgetKey("latest", nil), limit)
	require.NoError(t, err, "the next call waited for the slow call's connect")

	// The slow call's connection comes while the other call is let go
	// and not yet written: its request waits for that write, then the
	// interval.
	open()
	written := time.Now()
	sent(written)
	require.NoError(t, <-slow)
	mu.Lock()
	defer mu.Unlock()
	if h2 {
		assert.Equal(t, "HTTP/2.0", proto)
	} else {
		assert.Equal(t, "HTTP/1.1", proto)
	}
	assert.False(t, arrived.Before(written.Add(time.Second/10)),
		"the slow call's request arrived %v after the write of the call let go before it", arrived.Sub(written))
}
