package balancer

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replica is a backend for the tests: a TCP server on loopback that greets
// each connection with its name, then echoes lines, and a readiness
// endpoint whose answer the test sets.
type replica struct {
	name  string
	ln    net.Listener
	ready atomic.Bool
	polls atomic.Int64
	hs    *httptest.Server
}

func newReplica(t *testing.T, name string, ready bool) *replica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	r := &replica{name: name, ln: ln}
	r.ready.Store(ready)
	r.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.polls.Add(1)
		if req.URL.Path == "/readyz" && r.ready.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, name+"\n")
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					io.WriteString(c, name+":"+sc.Text()+"\n")
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); r.hs.Close() })
	return r
}

func (r *replica) backend() Backend {
	return Backend{Addr: r.ln.Addr().String(), Ready: r.hs.URL + "/readyz"}
}

// waitReady waits until the balancer sees exactly the replicas want ready.
func waitReady(t *testing.T, b *Balancer, want ...*replica) {
	t.Helper()
	var addrs []string
	for _, r := range want {
		addrs = append(addrs, r.ln.Addr().String())
	}
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(addrs, b.Ready()) || len(addrs) == 0 && len(b.Ready()) == 0 },
		10*time.Second, 5*time.Millisecond, "ready backends never became %v", addrs)
}

// greet connects through the balancer and returns the name of the replica
// that answered ("" when the connection was closed at once).
func greet(t *testing.T, b *Balancer) (string, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", b.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		require.ErrorIs(t, err, io.EOF)
		return "", c
	}
	return strings.TrimSpace(line), c
}

func TestRoundRobinOverReadyBackends(t *testing.T) {
	a, bb, c := newReplica(t, "a", true), newReplica(t, "b", true), newReplica(t, "c", false)
	b, err := Listen("127.0.0.1:0", Options{Interval: 10 * time.Millisecond}, a.backend(), bb.backend(), c.backend())
	require.NoError(t, err)
	defer b.Close()
	waitReady(t, b, a, bb)

	got := map[string]int{}
	for range 10 {
		name, _ := greet(t, b)
		got[name]++
	}
	assert.Equal(t, map[string]int{"a": 5, "b": 5}, got, "round robin over the ready ones; the not-ready one gets none")

	// c turns ready: it takes its turn; a turns not-ready: it gets none.
	c.ready.Store(true)
	a.ready.Store(false)
	waitReady(t, b, bb, c)
	got = map[string]int{}
	for range 10 {
		name, _ := greet(t, b)
		got[name]++
	}
	assert.Equal(t, map[string]int{"b": 5, "c": 5}, got)
	st := b.Stats()
	assert.EqualValues(t, 20, st.Accepted)
	assert.Zero(t, st.Refused)
	assert.EqualValues(t, 10, st.Routed[bb.ln.Addr().String()])
}

func TestNoReadyBackendClosesAtOnce(t *testing.T) {
	a := newReplica(t, "a", false)
	b, err := Listen("127.0.0.1:0", Options{Interval: 10 * time.Millisecond}, a.backend())
	require.NoError(t, err)
	defer b.Close()
	// Polled at least once, and not ready.
	require.Eventually(t, func() bool { return a.polls.Load() >= 2 }, 10*time.Second, time.Millisecond)
	name, _ := greet(t, b)
	assert.Empty(t, name, "nothing is ready: the connection is closed without reaching a backend")
	assert.EqualValues(t, 1, b.Stats().Refused)

	a.ready.Store(true)
	waitReady(t, b, a)
	name, _ = greet(t, b)
	assert.Equal(t, "a", name)
}

func TestDeadBackendRefusedUntilPolled(t *testing.T) {
	a, bb := newReplica(t, "a", true), newReplica(t, "b", true)
	b, err := Listen("127.0.0.1:0", Options{Interval: 10 * time.Millisecond}, a.backend(), bb.backend())
	require.NoError(t, err)
	defer b.Close()
	waitReady(t, b, a, bb)
	// a dies: its listener and its readiness go.
	a.ln.Close()
	a.hs.Close()
	waitReady(t, b, bb)
	for range 4 {
		name, _ := greet(t, b)
		assert.Equal(t, "b", name)
	}
}

func TestOpenConnectionsStayWhenNotReady(t *testing.T) {
	a := newReplica(t, "a", true)
	b, err := Listen("127.0.0.1:0", Options{Interval: 10 * time.Millisecond}, a.backend())
	require.NoError(t, err)
	defer b.Close()
	waitReady(t, b, a)
	name, c := greet(t, b)
	require.Equal(t, "a", name)
	r := bufio.NewReader(c)

	a.ready.Store(false) // draining: no new connections, the open one goes on
	waitReady(t, b)
	_, err = io.WriteString(c, "ping\n")
	require.NoError(t, err)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "a:ping\n", line)

	// The client's half-close reaches the backend, which ends the
	// connection: the client reads EOF.
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	_, err = r.ReadString('\n')
	assert.ErrorIs(t, err, io.EOF)
}

func TestCloseEndsRelayedConnections(t *testing.T) {
	a := newReplica(t, "a", true)
	b, err := Listen("127.0.0.1:0", Options{Interval: 10 * time.Millisecond}, a.backend())
	require.NoError(t, err)
	waitReady(t, b, a)
	name, c := greet(t, b)
	require.Equal(t, "a", name)
	require.NoError(t, b.Close())
	_, err = bufio.NewReader(c).ReadString('\n')
	assert.Error(t, err, "the relayed connection is closed with the balancer")
	_, err = net.DialTimeout("tcp", b.Addr(), time.Second)
	assert.Error(t, err, "the listener is closed")
}

func TestRemove(t *testing.T) {
	a, bb := newReplica(t, "a", true), newReplica(t, "b", true)
	b, err := Listen("127.0.0.1:0", Options{Interval: 10 * time.Millisecond}, a.backend(), bb.backend())
	require.NoError(t, err)
	defer b.Close()
	waitReady(t, b, a, bb)
	b.Remove(a.ln.Addr().String())
	for range 4 {
		name, _ := greet(t, b)
		assert.Equal(t, "b", name)
	}
}

// TestAddSignalsFirstReady: the channel Add returns stays open while the
// backend answers 503, and is closed by the first poll that answers 200;
// from then on the balancer routes to it.
func TestAddSignalsFirstReady(t *testing.T) {
	r := newReplica(t, "r", false)
	b, err := Listen("127.0.0.1:0", Options{Interval: 5 * time.Millisecond})
	require.NoError(t, err)
	defer b.Close()
	up := b.Add(r.backend())
	polled := r.polls.Load()
	require.Eventually(t, func() bool { return r.polls.Load() > polled+2 }, 10*time.Second, time.Millisecond, "polled while not ready")
	select {
	case <-up:
		t.Fatal("closed while the backend answers 503")
	default:
	}
	r.ready.Store(true)
	select {
	case <-up:
	case <-time.After(10 * time.Second):
		t.Fatal("not closed after the backend turned ready")
	}
	assert.Equal(t, []string{r.ln.Addr().String()}, b.Ready())
	name, _ := greet(t, b)
	assert.Equal(t, "r", name)
}
