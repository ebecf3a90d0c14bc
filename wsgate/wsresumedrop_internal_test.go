package wsgate

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
)

// TestResumeDropSparesAnotherReplicasRecord: a replica that drops a
// record to stay within its team's bound deletes it in Redis only while it
// is still the record its own connection wrote; a client that has since
// connected to another replica, which rewrote the record, keeps it. A
// record still this replica's is deleted.
func TestResumeDropSparesAnotherReplicasRecord(t *testing.T) {
	rs := redistest.New(t)
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rc.Close() })
	a := newResumeStore(time.Minute, 1, 10, rc, zap.NewNop(), time.Now, nil)
	b := newResumeStore(time.Minute, 1, 10, rc, zap.NewNop(), time.Now, nil)
	defer a.close()
	defer b.close()
	ctx := context.Background()
	now := time.Now().Unix()
	rec := func(conn string) resumeRecord {
		return resumeRecord{At: time.Now().UnixMilli(), Conn: conn, Marks: map[string]int64{"0x01": now}}
	}
	moved := resumeID("mainnet", "key", "", []feedid.ID{"0x01"})
	stays := resumeID("mainnet", "key", "", []feedid.ID{"0x02"})
	other := resumeID("mainnet", "key", "", []feedid.ID{"0x03"})
	team := map[string]string{moved: "t", stays: "t", other: "t"}

	// moved's connection on a ended; the client came back on b, which
	// rewrote the record with its own connection.
	a.write(map[string]resumeRecord{moved: rec("on-a")}, team, false)
	b.write(map[string]resumeRecord{moved: rec("on-b")}, team, false)
	// a's bound of 1 drops moved for stays: b's record is kept.
	a.write(map[string]resumeRecord{stays: rec("stays-on-a")}, team, false)
	b2, err := rc.Get(ctx, resumeKey(moved)).Bytes()
	require.NoError(t, err, "the record another replica rewrote is kept")
	var got resumeRecord
	require.NoError(t, json.Unmarshal(b2, &got))
	assert.Equal(t, "on-b", got.Conn)
	// a's bound drops stays for other: still a's own record, deleted.
	a.write(map[string]resumeRecord{other: rec("other-on-a")}, team, false)
	assert.Equal(t, int64(0), rc.Exists(ctx, resumeKey(stays)).Val(), "a's own record dropped is deleted")
	assert.Equal(t, int64(1), rc.Exists(ctx, resumeKey(other)).Val())
}
