package share

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The layout depends on the union only, and a feed added moves no other
// feed while the number of chunks stays.
func TestLayout(t *testing.T) {
	var feeds []string
	for i := range 120 {
		feeds = append(feeds, "0x"+strings.Repeat("0", 60)+fmt.Sprintf("%04x", i))
	}
	l := newLayout(feeds[:100], 4, 50)
	assert.Equal(t, 2, l.n, "100 feeds, 50 per connection")
	again := newLayout(slices.Clone(feeds[:100]), 4, 50)
	assert.Equal(t, l.chunks, again.chunks)
	total := 0
	for i, c := range l.chunks {
		total += len(c)
		assert.True(t, slices.IsSorted(c))
		for _, f := range c {
			assert.Equal(t, i, l.slot[f])
		}
	}
	assert.Equal(t, 100, total, "a full chunk spills into the next with room")
	assert.Zero(t, l.over)
	more := newLayout(feeds[:101], 4, 50)
	require.Equal(t, 3, more.n)
	less := newLayout(feeds[:99], 4, 50)
	require.Equal(t, 2, less.n)
	changed := 0
	for i := range less.chunks {
		if !slices.Equal(less.chunks[i], l.chunks[i]) {
			changed++
		}
	}
	assert.LessOrEqual(t, changed, 1, "one chunk changes")
	assert.Zero(t, newLayout(nil, 4, 50).n)
	assert.Equal(t, 4, newLayout(feeds, 4, 10).n, "capped by the connections")
	assert.Equal(t, 80, newLayout(feeds, 4, 10).over, "over 4 × 10")
}

// A message on the channel, whatever its bytes, never panics, only a
// well-formed frame of another replica reaches the hub (Deps.Deliver), and only
// this replica's own presence message counts as heard back.
func FuzzShareMessage(f *testing.F) {
	feed := "0x" + strings.Repeat("ab", 32)
	report := `{"report":{"feedID":"` + feed + `","fullReport":"0x00","validFromTimestamp":1,"observationsTimestamp":7}}`
	f.Add([]byte("sg1 F 1/0 other 3\n" + report))
	f.Add([]byte("sg1 F 1/0 me 3\n" + report))
	f.Add([]byte("sg1 H 1/0 other 1f 3,4\n"))
	f.Add([]byte("sg1 D 1/0 other 3\n"))
	f.Add([]byte("sg1 H 1/0 other\n"))
	f.Add([]byte("sg1\n"))
	f.Add([]byte("sg1 P me\n"))
	f.Add([]byte("sg1 P other\n"))
	f.Fuzz(func(t *testing.T, m []byte) {
		delivered := make(chan []byte, 4)
		s := &relay{id: "me", tick: 100 * time.Millisecond, remote: map[string]*remoteChunk{},
			mx: newShareMetrics(nil, "mainnet"), deliver: func(frame []byte, src *Session) {
				require.True(t, src.Valid(), "a frame's session is up when it comes")
				delivered <- frame
			}}
		s.echoSent.Store(1)
		s.receive(m)
		// Every message is a header line ended by '\n' (share.go), the
		// presence message too: without it nothing is taken.
		header, _, whole := strings.Cut(string(m), "\n")
		if rest, ok := strings.CutPrefix(header, "sg1 "); ok && whole && slices.Equal(strings.Fields(rest), []string{"P", "me"}) {
			assert.Zero(t, s.echoSent.Load(), "its own presence heard back")
		} else {
			assert.Equal(t, int64(1), s.echoSent.Load(), "not its own presence")
		}
		select {
		case got := <-delivered:
			fields := strings.Fields(header)
			require.GreaterOrEqual(t, len(fields), 5)
			assert.Equal(t, []string{"sg1", "F"}, fields[:2])
			assert.NotEqual(t, "me", fields[3], "its own frames are ignored")
			assert.True(t, strings.HasSuffix(string(m), string(got)), "the frame's bytes unchanged")
		default:
		}
	})
}
