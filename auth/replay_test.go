package auth

import (
	"encoding/binary"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replayCache is a ReplayRecord used with one grace, as the verifier's
// record was first written.
type replayCache struct {
	*ReplayRecord
	grace time.Duration
}

func newReplayCache(ttl, grace time.Duration) replayCache {
	r := NewReplayRecord()
	r.configure(ttl, 0, time.Time{})
	return replayCache{r, grace}
}

// firstUse records (key, sig) and reports whether it may be used.
func (rc replayCache) firstUse(key string, sig []byte, now time.Time) bool {
	return rc.use(replayKeyOf(key, sig), now, rc.grace) == nil
}

func TestReplayRecordFull(t *testing.T) {
	ks := testStore(t)
	now := time.UnixMilli(1_750_000_000_000)
	clock := now
	v := NewVerifier(VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, ReplayGrace: time.Second,
		ReplayMaxEntries: 3, Now: func() time.Time { return clock }})
	req := func(i int) *http.Request {
		return signedRequest("/api/v1/feeds?i="+strconv.Itoa(i), "k-trading", "new-secret-0123456789", now)
	}
	for i := range 3 {
		_, err := v.Verify(ks, req(i))
		require.NoError(t, err)
	}
	_, err := v.Verify(ks, req(3))
	require.ErrorIs(t, err, ErrReplayFull, "a fourth signature, not recorded, is refused")
	assert.NotErrorIs(t, err, ErrReplay)
	assert.Equal(t, "replay_full", Reason(err))
	var fe *ReplayFullError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, 20*time.Second, fe.RetryAfter, "all in the current generation: room after two rotations")

	// Signatures recorded are still decided as before.
	clock = now.Add(500 * time.Millisecond)
	_, err = v.Verify(ks, req(0))
	assert.NoError(t, err, "a twin within the grace")
	clock = now.Add(2 * time.Second)
	_, err = v.Verify(ks, req(1))
	assert.ErrorIs(t, err, ErrReplay)

	st := v.Stats()
	assert.Equal(t, ReplayStats{Entries: 3, Bytes: 3 * ReplayEntryBytes, MaxEntries: 3, FullRefusals: 1}, st)

	// The generation rotates out, and there is room again.
	clock = now.Add(20 * time.Second)
	_, err = v.Verify(ks, signedRequest("/api/v1/feeds?i=4", "k-trading", "new-secret-0123456789", clock))
	assert.NoError(t, err)
	assert.Equal(t, 1, v.Stats().Entries)
}

func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func TestReplayRecordGivesMemoryBack(t *testing.T) {
	const n = 200_000
	t0 := time.Unix(1_750_000_000, 0)
	rc := newReplayCache(10*time.Second, 0)
	before := heapInuse()
	var k replayKey
	for i := range n {
		binary.LittleEndian.PutUint64(k[:], uint64(i)*0x9e3779b97f4a7c15)
		require.NoError(t, rc.use(k, t0.Add(time.Duration(i)*time.Microsecond), 0))
	}
	peak := heapInuse()
	grown := int64(peak) - int64(before)
	st := rc.Stats()
	require.Equal(t, n, st.Entries)
	t.Logf("%d entries: heap grew %.1f MB, %.1f bytes an entry; Stats says %.1f MB",
		n, float64(grown)/1e6, float64(grown)/n, float64(st.Bytes)/1e6)
	assert.InDelta(t, 1, float64(grown)/float64(st.Bytes), 0.5, "Bytes approximates the heap taken")

	// One rotation moves the entries to the older generation; they are
	// all still needed.
	require.NoError(t, rc.use(replayKey{1}, t0.Add(10*time.Second), 0))
	assert.Equal(t, n+1, rc.Stats().Entries)
	// Past 2×ttl, both generations go, and their memory with them.
	require.NoError(t, rc.use(replayKey{2}, t0.Add(30*time.Second), 0))
	assert.Equal(t, 1, rc.Stats().Entries)
	after := heapInuse()
	t.Logf("after rotation: %.1f MB above the start", float64(int64(after)-int64(before))/1e6)
	assert.Less(t, int64(after)-int64(before), grown/2, "the rotated maps' memory is given back")
	runtime.KeepAlive(rc)
}
