package realtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Many subscriptions over a few feeds share one upstream connection and
// each gets its feeds' frames, the upstream's bytes, once, in order.
func TestFanOutSharesConnections(t *testing.T) {
	e := newEnv(t, nil)
	h := e.hub(t, nil)
	feeds := e.crypto(t, 3)
	var cs []*collector
	for i := range 60 {
		sub := []string{feeds[i%3]}
		if i%2 == 0 {
			sub = append(sub, feeds[(i+1)%3])
		}
		cs = append(cs, collect(t, h.Subscribe(sub, 0)))
	}
	e.run(t, 30*time.Millisecond)
	for i, c := range cs {
		require.Eventually(t, func() bool { return c.count(feeds[i%3]) >= 8 }, wait, 5*time.Millisecond, "subscriber %d", i)
	}
	assert.LessOrEqual(t, e.open(), int64(2))
	assert.Equal(t, 1, h.Stats().Up())
	for i, c := range cs {
		for j, f := range feeds {
			fs := c.of(f)
			wanted := j == i%3 || (i%2 == 0 && j == (i+1)%3)
			if !wanted {
				assert.Empty(t, fs, "subscriber %d got a feed it did not ask for", i)
				continue
			}
			consecutive(t, fs)
		}
	}
	// Byte for byte the REST answer of that second.
	for _, fr := range cs[0].of(feeds[0])[:3] {
		assert.Equal(t, string(e.rest(t, fr.feed, fr.ts)), string(fr.data))
	}
	st := h.Stats()
	assert.Equal(t, 3, st.FeedsSubscribed)
	assert.Equal(t, 60, st.Subscribers)
	assert.Greater(t, st.FramesOut, st.FramesIn)
}
