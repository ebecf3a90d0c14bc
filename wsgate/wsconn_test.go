package wsgate

import (
	"bytes"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/realtime"
)

// The frame header written for each report is the one RFC 6455 readers
// parse: every length form (7-bit, 16-bit, 64-bit), final, unmasked.
func TestAppendFrameHeader(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 1000, 65535, 65536, 300000} {
		payload := bytes.Repeat([]byte{'x'}, n)
		b := append(appendFrameHeader(nil, ws.OpBinary, n), payload...)
		r := bytes.NewReader(b)
		h, err := ws.ReadHeader(r)
		require.NoError(t, err, "length %d", n)
		assert.True(t, h.Fin, "length %d", n)
		assert.False(t, h.Masked, "a server's frames are not masked")
		assert.Equal(t, ws.OpBinary, h.OpCode)
		assert.Equal(t, int64(n), h.Length)
		assert.Equal(t, n, r.Len(), "the payload follows the header")
	}
}

// drain takes what is queued, up to one batch, and notices a closed
// channel.
func TestDrain(t *testing.T) {
	fr := func(s string) *realtime.Frame { return &realtime.Frame{Bytes: []byte(s)} }
	ch := make(chan *realtime.Frame, wsMaxBatch+10)
	for range wsMaxBatch + 5 {
		ch <- fr("r")
	}
	frames, ok := drain([]*realtime.Frame{fr("first")}, ch)
	assert.True(t, ok)
	assert.Len(t, frames, wsMaxBatch, "one batch at most")
	frames, ok = drain([]*realtime.Frame{fr("first")}, ch)
	assert.True(t, ok)
	assert.Len(t, frames, 1+6, "the rest")
	ch <- fr("last")
	close(ch)
	frames, ok = drain([]*realtime.Frame{fr("first")}, ch)
	assert.False(t, ok, "closed")
	assert.Len(t, frames, 2, "what was queued before the close is kept")
}

// TestWriteDeadlineEndsAStuckWrite: the write deadline, set again only
// when it has come wsDeadlineRefresh nearer, still ends a write to a
// client that stopped reading (a real socket over loopback, filled until
// a write blocks) with a timeout, within the write timeout of that
// write's start: the deadline in force is never later than that.
func TestWriteDeadlineEndsAStuckWrite(t *testing.T) {
	conn, _ := loopbackPair(t) // the peer never reads

	c := &wsConn{conn: conn, timeout: 500 * time.Millisecond}
	frame := bytes.Repeat([]byte{'x'}, 64<<10)
	batch := [][]byte{frame, frame, frame, frame}
	type result struct {
		err       error
		start     time.Time
		writes    int
		deadline  time.Time
		deadlines int
	}
	done := make(chan result, 1)
	go func() {
		var r result
		var last time.Time
		for r.writes = 1; r.writes < 100000; r.writes++ {
			r.start = time.Now()
			r.err = c.writeBatch(batch, ws.OpBinary, false)
			c.mu.Lock()
			r.deadline = c.deadline
			c.mu.Unlock()
			if !r.deadline.Equal(last) {
				r.deadlines++
				last = r.deadline
			}
			if r.err != nil {
				break
			}
		}
		done <- r
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("a write to a client that reads nothing never ended")
	}
	t.Logf("%d writes, %d deadlines set", r.writes, r.deadlines)
	require.Error(t, r.err, "the socket filled up: a write blocked")
	assert.True(t, errors.Is(r.err, os.ErrDeadlineExceeded), "ended by the write deadline: %v", r.err)
	assert.False(t, r.deadline.After(r.start.Add(c.timeout)), "the deadline in force is within the write timeout of the stuck write's start")
	assert.Less(t, r.deadlines, r.writes, "not set again at every write")
}

// loopbackPair returns the two ends of a real TCP connection over
// loopback, closed when the test ends.
func loopbackPair(t *testing.T) (conn, peer net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		p, err := ln.Accept()
		if err == nil {
			accepted <- p
		}
	}()
	conn, err = net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	peer = <-accepted
	t.Cleanup(func() { peer.Close() })
	return conn, peer
}
