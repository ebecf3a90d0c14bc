package upstreamsim

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"

	"streamgate/auth"
)

// BenchmarkWSIdleConn measures what an open WebSocket connection of the
// streams of mainnet that the key may read costs the simulator: heap and
// stack bytes and goroutines per connection. The clients are raw TCP
// connections that did the handshake and hold no buffer or goroutine, so
// the figures are the server's. Run it with a fixed count, e.g.
// -benchtime=1000x (each connection holds two file descriptors).
func BenchmarkWSIdleConn(b *testing.B) {
	s := newTestSim(b, func(c *Config) { // the clock stands still: no frames
		c.WSMaxConnsPerKey = -1
		c.WSPingInterval = -1
	})
	srv := httptest.NewServer(s.Handler(Mainnet))
	defer srv.Close()
	var feeds []string
	for _, st := range s.Streams(Mainnet) {
		feeds = append(feeds, st.FeedID)
	}
	target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, ",")
	ts := strconv.FormatInt(t0.UnixMilli(), 10)
	handshake := "GET " + target + " HTTP/1.1\r\nHost: sim\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		auth.HeaderAuthorization + ": " + OrgKeyID + "\r\n" + auth.HeaderTimestamp + ": " + ts + "\r\n" +
		auth.HeaderSignature + ": " + auth.SignatureHex([]byte(OrgKeySecret), http.MethodGet, target, auth.EmptyBodyHash, OrgKeyID, ts) + "\r\n\r\n"
	addr := strings.TrimPrefix(srv.URL, "http://")

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	b.ResetTimer()
	for range b.N {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte(handshake)); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			b.Fatalf("handshake: %v %v", resp, err)
		}
	}
	b.StopTimer()
	deadline := time.Now().Add(10 * time.Second)
	for s.Counters().WSTotal(Mainnet).Open < int64(b.N) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := float64(b.N)
	b.ReportMetric(float64(after.HeapInuse+after.StackInuse-before.HeapInuse-before.StackInuse)/n, "B/conn")
	b.ReportMetric(float64(after.StackInuse-before.StackInuse)/n, "stackB/conn")
	b.ReportMetric(float64(runtime.NumGoroutine()-g0)/n, "goroutines/conn")
	b.ReportMetric(float64(len(feeds)), "feeds/conn")
}

// BenchmarkWSFrames measures the server's cost of one report frame: a
// connection of every readable mainnet stream, the clock moved one second
// per round, and every frame of that second read by the client.
func BenchmarkWSFrames(b *testing.B) {
	clk := clockwork.NewFakeClockAt(t0)
	s := newTestSim(b, func(c *Config) {
		c.Now = clk.Now
		c.WSTick = time.Millisecond
		c.WSPingInterval = -1
	})
	srv := httptest.NewServer(s.Handler(Mainnet))
	defer srv.Close()
	var feeds []string
	for _, st := range s.Streams(Mainnet) {
		if _, last, ok := s.Window(Mainnet, st.FeedID); ok && last >= t0.Unix()-3 {
			feeds = append(feeds, st.FeedID) // live streams only
		}
	}
	target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, ",")
	ts := strconv.FormatInt(t0.UnixMilli(), 10)
	h := http.Header{}
	h.Set(auth.HeaderAuthorization, OrgKeyID)
	h.Set(auth.HeaderTimestamp, ts)
	h.Set(auth.HeaderSignature, auth.SignatureHex([]byte(OrgKeySecret), http.MethodGet, target, auth.EmptyBodyHash, OrgKeyID, ts))
	ctx := context.Background()
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+target, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.CloseNow()
	b.ReportAllocs()
	b.ResetTimer()
	frames := 0
	for range b.N {
		clk.Advance(time.Second)
		for range len(feeds) {
			if _, _, err := conn.Read(ctx); err != nil {
				b.Fatal(err)
			}
			frames++
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
}
