package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"streamgate/auth"
)

// frameHead is what a client reads of each frame.
type frameHead struct {
	Report struct {
		FeedID                string `json:"feedID"`
		ObservationsTimestamp int64  `json:"observationsTimestamp"`
	} `json:"report"`
}

// arrival is one frame a client received.
type arrival struct {
	feed int   // index into the scenario's streams
	ts   int64 // observationsTimestamp
	at   int64 // arrival, Unix nanoseconds
}

// wsClient is one WebSocket client: its streams and what it received.
type wsClient struct {
	feeds    []int
	mu       sync.Mutex
	got      []arrival
	closed   error
	unknown  int64 // frames of a stream it did not ask for
	notReady bool
}

// refTimes holds, per (stream, second), when a reference client connected
// straight to the simulator received the report: the gateway's hub reads
// the same upstream at the same moment, so this is the gateway's receipt
// time to within the simulator's writing of two connections.
type refTimes struct {
	mu sync.Mutex
	at map[[2]int64]int64
}

func (r *refTimes) get(feed int, ts int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.at[[2]int64{int64(feed), ts}]
	return v, ok
}

// wsDialTimeout bounds one client's dial: thousands of clients connecting
// to a gateway already streaming to the first ones on a loaded machine
// take longer than 10 s at the tail.
const wsDialTimeout = time.Minute

// dialWS opens a signed WebSocket to base (http://host:port) for feeds.
func dialWS(ctx context.Context, base string, k key, st *stamps, keyIndex int, feeds []string) (*websocket.Conn, error) {
	target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, ",")
	req, err := http.NewRequest(http.MethodGet, base+target, nil)
	if err != nil {
		return nil, err
	}
	auth.Sign(req, k.ID, k.Secret, time.UnixMilli(st.next(keyIndex, target, time.Now())))
	dctx, cancel := context.WithTimeout(ctx, wsDialTimeout)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(base, "http")+target, &websocket.DialOptions{
		HTTPHeader: req.Header, CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("upgrade: status %d: %w", resp.StatusCode, err)
		}
		return nil, err
	}
	c.SetReadLimit(64 << 10)
	return c, nil
}

// heap returns the heap in use and the goroutines after a collection.
func heap() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, runtime.NumGoroutine()
}

// connectAll dials n clients (at most 50 at a time) and starts a reader
// for each; it returns the connections.
func connectAll(ctx context.Context, n int, dial func(i int) (*websocket.Conn, error), read func(i int, c *websocket.Conn)) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 50)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conns[i], errs[i] = dial(i)
			if errs[i] == nil {
				go read(i, conns[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
		return nil, err
	}
	return conns, ctx.Err()
}

// clientOnlyHeap measures what n WebSocket clients cost this process
// without the gateway: the same clients held open by a bare coder/websocket
// server that sends nothing. It returns heap bytes and goroutines per
// client, both ends together (client and bare server).
func clientOnlyHeap(ctx context.Context, n int) (float64, float64, error) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer c.CloseNow()
		<-c.CloseRead(context.Background()).Done()
	}))
	defer srv.Close()
	h0, g0 := heap()
	conns, err := connectAll(ctx, n, func(int) (*websocket.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, wsDialTimeout)
		defer cancel()
		c, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/", &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
		return c, err
	}, func(_ int, c *websocket.Conn) { c.Read(context.Background()) })
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(200 * time.Millisecond)
	h1, g1 := heap()
	for _, c := range conns {
		c.CloseNow()
	}
	return (float64(h1) - float64(h0)) / float64(n), float64(g1-g0) / float64(n), nil
}
