package wsgate

import (
	"bytes"
	"testing"

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
