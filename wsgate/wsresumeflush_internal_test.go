package wsgate

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/realtime"
)

// TestResumeFlushWritesOnlyWhatChanged: a flush looks at the marks written
// to since the last one, never at an idle connection's: with an idle
// mark's lock held elsewhere it still completes, and writes the busy
// connection's record alone; a second flush with nothing written writes
// nothing.
func TestResumeFlushWritesOnlyWhatChanged(t *testing.T) {
	s := newResumeStore(time.Minute, 10, 100, nil, zap.NewNop(), time.Now, nil)
	defer s.close()
	now := time.Now().Unix()
	a, b := feedid.ID("0x01"), feedid.ID("0x02")
	idle := s.track("t", resumeID("mainnet", "idle", "", []feedid.ID{a}), map[string]int64{string(a): now - 5}, nil)
	busy := s.track("t", resumeID("mainnet", "busy", "", []feedid.ID{b}), nil, nil)
	busy.written([]*realtime.Frame{{Stream: b, ObservationsTimestamp: now - 1}, {Stream: b, ObservationsTimestamp: now}})

	idle.mu.Lock()
	done := make(chan struct{})
	go func() { s.flush(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		idle.mu.Unlock()
		<-done
		t.Fatal("the flush waited for an idle connection's mark")
	}
	idle.mu.Unlock()

	rec, ok, err := s.record(t.Context(), busy.id)
	require.NoError(t, err)
	require.True(t, ok, "the busy connection's record is written")
	assert.Equal(t, busy.conn, rec.Conn)
	assert.Equal(t, map[string]int64{string(b): now}, rec.Marks)
	_, ok, _ = s.record(t.Context(), idle.id)
	assert.False(t, ok, "nothing written to the idle connection: no record")
	assert.Empty(t, s.changed.take(), "the flush took the list")

	s.flush()
	again, _, _ := s.record(t.Context(), busy.id)
	assert.Equal(t, rec.At, again.At, "nothing written since: not written again")
}

// TestResumeMemoryRecordsExpire: the records kept in memory are forgotten
// once their newest watermark is a window old, each at its own time, a
// record written again expiring from its new newest watermark; the
// index's count follows.
func TestResumeMemoryRecordsExpire(t *testing.T) {
	var clock atomic.Int64
	start := time.Now().Truncate(time.Second)
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	s := newResumeStore(time.Minute, 10, 100, nil, zap.NewNop(), now, nil)
	defer s.close()
	at := func(secs int64) resumeRecord {
		return resumeRecord{At: start.UnixMilli(), Conn: "c", Marks: map[string]int64{"0x01": start.Unix() - 30, "0x02": start.Unix() + secs}}
	}
	teams := map[string]string{"early": "t", "late": "t", "rewritten": "t"}
	s.write(map[string]resumeRecord{"early": at(-20), "late": at(0), "rewritten": at(-20)}, teams, false)
	s.write(map[string]resumeRecord{"rewritten": at(10)}, teams, false)
	kept := func() []string {
		s.mu.Lock()
		defer s.mu.Unlock()
		var ids []string
		for id, e := range s.index.byID {
			if e.kept {
				ids = append(ids, id)
			}
		}
		assert.Equal(t, len(ids), s.index.len(), "the index counts what is kept")
		return ids
	}
	s.flush()
	assert.ElementsMatch(t, []string{"early", "late", "rewritten"}, kept())

	clock.Store(start.Add(40 * time.Second).UnixNano()) // early's newest is a window old
	s.flush()
	assert.ElementsMatch(t, []string{"late", "rewritten"}, kept())
	clock.Store(start.Add(60 * time.Second).UnixNano())
	s.flush()
	assert.ElementsMatch(t, []string{"rewritten"}, kept(), "rewritten expires from its new newest watermark")
	clock.Store(start.Add(70 * time.Second).UnixNano())
	s.flush()
	assert.Empty(t, kept())
}

// TestResumeMemoryDropForgetsTheRecord: in a store without Redis, a
// record dropped to stay within the team's bound is gone, whichever
// connection wrote it last: here an identity's record, written by an
// earlier connection, is rewritten by a later one in the same batch that
// then drops it (two more of the team after it). A client of that
// identity starts live, and the records kept are those the index counts.
func TestResumeMemoryDropForgetsTheRecord(t *testing.T) {
	s := newResumeStore(time.Minute, 2, 100, nil, zap.NewNop(), time.Now, nil)
	defer s.close()
	now := time.Now().Unix()
	rec := func(conn string) resumeRecord {
		return resumeRecord{At: time.Now().UnixMilli(), Conn: conn, Marks: map[string]int64{"0x01": now}}
	}
	s.store([]resumeWrite{{id: "x", team: "t", rec: rec("first")}, {id: "a", team: "t", rec: rec("a")}}, false)
	s.store([]resumeWrite{
		{id: "x", team: "t", rec: rec("second")},
		{id: "b", team: "t", rec: rec("b")}, // drops a
		{id: "c", team: "t", rec: rec("c")}, // drops x
	}, false)
	for id, want := range map[string]bool{"x": false, "a": false, "b": true, "c": true} {
		_, ok, err := s.record(t.Context(), id)
		require.NoError(t, err)
		assert.Equal(t, want, ok, "record of %s kept", id)
	}
	assert.Equal(t, 2, s.index.len())
}
