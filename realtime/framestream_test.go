package realtime

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/feedid"
)

// TestFramesOfAStreamShareItsID: every live frame of a stream carries the
// same ID string, the hub's own (not a copy read from each frame), so
// that what is kept per frame holds one ID per stream and a consumer
// finds its per-stream state by the string's address (wsgate's resume
// marks).
func TestFramesOfAStreamShareItsID(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	feeds := e.crypto(t, 2)
	e.run(t, 25*time.Millisecond)
	sub := subscribe(t, h, feeds, SubscribeOptions{Queue: 4096})
	defer sub.Close()
	first := map[feedid.ID]*byte{}
	seen := map[feedid.ID]int{}
	for seen[feeds[0]] < 3 || seen[feeds[1]] < 3 {
		f, ok := <-sub.C()
		require.True(t, ok, "the subscription ended: %v", sub.Err())
		p := unsafe.StringData(string(f.Stream))
		if q, ok := first[f.Stream]; ok {
			assert.Same(t, q, p, "%s at %d: the stream's ID string", f.Stream, f.ObservationsTimestamp)
		} else {
			first[f.Stream] = p
		}
		seen[f.Stream]++
	}
	assert.NotSame(t, first[feeds[0]], first[feeds[1]])
}
