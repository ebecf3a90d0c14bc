package wsgate

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/internal/testing/redistest"
	"streamgate/redisconn"
)

// TestResumeStoreOnCluster: on a Redis Cluster, one replica's flush writes
// the records of many clients, whose keys fall in many slots, in one
// pipeline; another replica's store reads each of them back, and a record
// deleted (its client closed the connection) is gone for both.
func TestResumeStoreOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("Redis Cluster: not with -short")
	}
	cl := redistest.NewCluster(t)
	client := func() redis.UniversalClient {
		// Bounds for a loaded machine: the test is about where the
		// records go, and a flush's write that times out is dropped
		// silently (the record is then not found).
		c, err := redisconn.New(redisconn.Target{Cluster: cl.Addrs()}, redisconn.Options{CommandTimeout: 10 * time.Second, DialTimeout: 10 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := newResumeStore(time.Minute, 200, 5000, client(), zap.NewNop(), time.Now, nil)
	b := newResumeStore(time.Minute, 200, 5000, client(), zap.NewNop(), time.Now, nil)
	defer a.close()
	defer b.close()

	recs := map[string]resumeRecord{}
	teams := map[string]string{}
	slots := map[int]bool{}
	now := time.Now().Unix() // marks within the window: the records are kept
	for i := range 64 {
		id := resumeID("mainnet", "key-"+strconv.Itoa(i), "", []feedid.ID{"0x01", "0x02"})
		recs[id] = resumeRecord{At: time.Now().UnixMilli(), Conn: "c" + strconv.Itoa(i), Marks: map[string]int64{"0x01": now - int64(i%5), "0x02": now - int64(i%7)}}
		teams[id] = "team-" + strconv.Itoa(i%4)
		slots[redistest.Slot(resumeKey(id))] = true
	}
	require.Greater(t, len(slots), 3, "the records fall in many slots")
	a.write(recs, teams, false)
	for id, want := range recs {
		marks, unread := b.load(context.Background(), id, nil)
		require.False(t, unread, "the record of %q was read", id)
		require.Equal(t, want.Marks, marks, "the other replica finds the record of %q", id)
	}
	var gone string
	for id := range recs {
		gone = id
		break
	}
	b.forget(gone)
	marks, unread := a.load(context.Background(), gone, nil)
	require.False(t, unread)
	require.Empty(t, marks, "a deleted record is gone")
}
