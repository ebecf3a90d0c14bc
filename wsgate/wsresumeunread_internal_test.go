package wsgate

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
	"streamgate/realtime"
	"streamgate/redisconn"
)

// TestResumeUnreadRecordCountedOnceRead: a client connects while Redis
// does not answer (paused): its record cannot be read, so it is resumed
// from a window before now. The record is read again once Redis answers,
// before the connection's own record is written over it, and the
// seconds it shows the client may have missed before that window are
// counted, once: those of a stream whose watermark is older than the
// window the client got, not those of a stream the window covers, nor
// those of one beyond the resume window (which would have started live).
func TestResumeUnreadRecordCountedOnceRead(t *testing.T) {
	rs := redistest.New(t)
	rc, err := redisconn.NewURL(rs.URL(), "", redisconn.Options{}) // the gateway's client: deadlines, breaker
	require.NoError(t, err)
	t.Cleanup(func() { rc.Close() })
	s := newResumeStore(time.Minute, 200, 5000, rc, zap.NewNop(), time.Now, nil)
	defer s.close()
	ctx := context.Background()
	feed := func(i int) feedid.ID { return feedid.ID("0x000" + strconv.Itoa(i) + strings.Repeat("ab", 30)) }
	feeds := []feedid.ID{feed(1), feed(2), feed(3)}
	id := resumeID("mainnet", "key", "", feeds)
	now := time.Now().Unix()
	s.write(map[string]resumeRecord{id: {At: time.Now().UnixMilli(), Conn: "before", Marks: map[string]int64{
		string(feeds[0]): now - 30, // 20 seconds before the window the client gets
		string(feeds[1]): now - 5,  // within it
		string(feeds[2]): now - 90, // beyond the resume window
	}}}, map[string]string{id: "team"}, false)
	require.Equal(t, int64(1), rc.Exists(ctx, resumeKey(id)).Val())

	rs.Pause()
	t.Cleanup(rs.Resume)
	marks, unread := s.load(ctx, id, feeds)
	require.True(t, unread, "the record could not be read")
	require.Len(t, marks, len(feeds))
	from := marks[string(feeds[0])]
	assert.InDelta(t, now-int64(unreadWindow/time.Second), from, 2, "resumed from a window before now")
	for _, f := range feeds {
		assert.Equal(t, from, marks[string(f)])
	}
	var missed, calls atomic.Int64
	m := s.track("team", id, marks, func(n int64) { calls.Add(1); missed.Add(n) })
	// The connection writes a report: its record is due to be written.
	m.written([]*realtime.Frame{{Stream: feeds[0], ObservationsTimestamp: now}})

	rs.Resume()
	require.Eventually(t, func() bool {
		b, err := rc.Get(ctx, resumeKey(id)).Bytes()
		var rec resumeRecord
		return err == nil && json.Unmarshal(b, &rec) == nil && rec.Conn == m.conn
	}, 10*time.Second, 10*time.Millisecond, "the connection's record written once the old one was read")
	assert.Equal(t, from-(now-30), missed.Load(), "the seconds of the first stream before the window")
	assert.Equal(t, int64(1), calls.Load())
	s.end(m, false, false)
	assert.Equal(t, int64(1), calls.Load(), "counted once")
}
