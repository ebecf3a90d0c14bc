package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"

	"streamgate/internal/testing/fleet"
	"streamgate/upstreamsim"
)

// bareFanout is the ws scenario's baseline: about the least a Go server
// can do to fan one upstream WebSocket out to many clients. It holds one
// connection to the simulator with every stream, takes any client
// (no signature, no entitlement, no limits, no audit, no metrics, no
// HA, no reconnects), and writes each client's queued frames in one write
// as the gateway does. What the gateway's delay and CPU have beyond it is
// the cost of being a gateway; what they share is this machine's.
type bareFanout struct {
	srv  *httptest.Server
	up   *websocket.Conn
	done chan struct{}

	mu   sync.RWMutex
	subs map[string]map[chan []byte]struct{} // feed → client queues
}

// startBareFanout connects to the simulator at upstream (http://…) for
// feeds and starts serving clients.
func startBareFanout(ctx context.Context, upstream string, feeds []string) (*bareFanout, error) {
	org := key{ID: upstreamsim.OrgKeyID, Secret: []byte(upstreamsim.OrgKeySecret)}
	up, err := dialWS(ctx, upstream, org, newStamps(), 0, feeds)
	if err != nil {
		return nil, err
	}
	b := &bareFanout{up: up, done: make(chan struct{}), subs: map[string]map[chan []byte]struct{}{}}
	b.srv = httptest.NewServer(http.HandlerFunc(b.serve))
	go b.pump()
	return b, nil
}

func (b *bareFanout) URL() string { return b.srv.URL }

func (b *bareFanout) Close() {
	b.up.CloseNow()
	<-b.done
	b.srv.CloseClientConnections()
	b.srv.Close()
}

// pump hands each upstream frame to the queues of its stream's clients,
// dropping it for a client whose queue is full.
func (b *bareFanout) pump() {
	defer close(b.done)
	for {
		_, frame, err := b.up.Read(context.Background())
		if err != nil {
			return
		}
		feed, _, err := fleet.FrameFields(frame)
		if err != nil {
			continue
		}
		b.mu.RLock()
		for q := range b.subs[string(feed)] {
			select {
			case q <- frame:
			default:
			}
		}
		b.mu.RUnlock()
	}
}

func (b *bareFanout) serve(w http.ResponseWriter, r *http.Request) {
	feeds := strings.Split(r.URL.Query().Get("feedIDs"), ",")
	conn, _, _, err := ws.UpgradeHTTP(r, w)
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		return
	}
	defer conn.Close()
	q := make(chan []byte, 256)
	b.mu.Lock()
	for _, f := range feeds {
		if b.subs[f] == nil {
			b.subs[f] = map[chan []byte]struct{}{}
		}
		b.subs[f][q] = struct{}{}
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		for _, f := range feeds {
			delete(b.subs[f], q)
		}
		b.mu.Unlock()
	}()
	gone := make(chan struct{})
	go func() { // clients send nothing but their close
		io.Copy(io.Discard, conn)
		close(gone)
	}()
	var buf []byte
	for {
		select {
		case f := <-q:
			buf = appendBinary(buf[:0], f)
		more:
			for {
				select {
				case f := <-q:
					buf = appendBinary(buf, f)
				default:
					break more
				}
			}
			if _, err := conn.Write(buf); err != nil {
				return
			}
		case <-gone:
			return
		}
	}
}

// appendBinary appends p as one final, unmasked binary frame.
func appendBinary(buf, p []byte) []byte {
	h := ws.Header{Fin: true, OpCode: ws.OpBinary, Length: int64(len(p))}
	var w bytesAppender
	w.b = buf
	_ = ws.WriteHeader(&w, h) // cannot fail: the writer is a slice
	return append(w.b, p...)
}

type bytesAppender struct{ b []byte }

func (a *bytesAppender) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}
