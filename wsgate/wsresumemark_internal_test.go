package wsgate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/realtime"
)

// TestResumeMarkRecordsStayAsTaken: a record taken at a flush keeps the
// watermarks of that moment while the connection's writer goes on (a
// stream's newer second, a stream new to the connection, an older second
// that changes nothing), read at the same time as the writer writes; the
// next flush takes the new ones, and an older second alone lists
// nothing to write.
func TestResumeMarkRecordsStayAsTaken(t *testing.T) {
	s := newResumeStore(time.Minute, 10, 100, nil, zap.NewNop(), time.Now, nil)
	s.start.Do(func() {}) // no flusher of its own: the test flushes
	now := time.Now().Unix()
	a, b, c := feedid.ID("0x01"), feedid.ID("0x02"), feedid.ID("0x03")
	frame := func(f feedid.ID, ts int64) *realtime.Frame {
		return &realtime.Frame{Stream: f, ObservationsTimestamp: ts}
	}
	m := s.track("t", resumeID("mainnet", "k", "", []feedid.ID{a, b, c}), map[string]int64{string(a): now - 3}, nil)
	m.written([]*realtime.Frame{frame(a, now-2), frame(b, now-2)})
	s.flush()
	s.mu.Lock()
	first, _ := s.index.record(m.id)
	s.mu.Unlock()

	// The writer goes on while the record taken is read.
	read := make(chan map[string]int64)
	go func() {
		var got map[string]int64
		for range 100 {
			got = first.withMarks().Marks
		}
		read <- got
	}()
	for ts := now - 1; ts <= now; ts++ {
		m.written([]*realtime.Frame{frame(c, ts), frame(a, ts), frame(b, ts-5)})
	}
	assert.Equal(t, map[string]int64{string(a): now - 2, string(b): now - 2}, <-read, "the record taken keeps its watermarks")
	assert.Equal(t, map[string]int64{string(a): now - 2, string(b): now - 2}, first.withMarks().Marks)

	s.flush()
	rec, ok, err := s.record(t.Context(), m.id)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, map[string]int64{string(a): now, string(b): now - 2, string(c): now}, rec.Marks, "the next flush takes the new watermarks")

	m.written([]*realtime.Frame{frame(a, now-1), frame(c, now)})
	assert.Empty(t, s.changed.take(), "older or equal seconds change nothing: nothing listed to write")
}

// TestResumeFlushAllocations: a flush's cost per connection written to
// is one copy of its timestamps into buffers kept between flushes (the
// flush's, then the record's own), not its watermarks rebuilt nor a
// slice made: 200 connections of 10 streams each written one second and
// flushed, with no allocation per connection (a few for the flush as a
// whole at most).
func TestResumeFlushAllocations(t *testing.T) {
	s := newResumeStore(time.Minute, 1000, 1000, nil, zap.NewNop(), time.Now, nil)
	s.start.Do(func() {}) // no flusher of its own: the test flushes
	ts := time.Now().Unix()
	streams := make([]*realtime.Frame, 20)
	for i := range streams {
		streams[i] = &realtime.Frame{Stream: feedid.ID(fmt.Sprintf("0x0003%060x", i)), ObservationsTimestamp: ts}
	}
	marks := make([]*resumeMark, 200)
	for i := range marks {
		marks[i] = s.track("t", fmt.Sprintf("client-%d", i), nil, nil)
		marks[i].written(streams[i%10 : i%10+10])
	}
	s.flush() // the records and their index entries exist: what follows rewrites them
	allocs := testing.AllocsPerRun(5, func() {
		ts++
		for _, f := range streams {
			f.ObservationsTimestamp = ts
		}
		for i, m := range marks {
			m.written(streams[i%10 : i%10+10])
		}
		s.flush()
	})
	t.Logf("%.0f allocations for a second of %d connections", allocs, len(marks))
	assert.LessOrEqual(t, allocs, float64(len(marks)/20), "no allocation per connection written to")
}

// TestResumeMarkFindsAStreamByAnyCopyOfItsID: a stream's watermark is
// found by the address of the ID string that set it (the hub's, shared
// by all its frames) and by any other copy of the same ID (a fill's
// frame, a record's): one place per stream, each raised only by a newer
// second, beyond markScan streams too.
func TestResumeMarkFindsAStreamByAnyCopyOfItsID(t *testing.T) {
	s := newResumeStore(time.Minute, 10, 100, nil, zap.NewNop(), time.Now, nil)
	s.start.Do(func() {})
	now := time.Now().Unix()
	var ids []feedid.ID
	for i := range markScan + 4 {
		ids = append(ids, feedid.ID(fmt.Sprintf("0x%064x", i+1)))
	}
	m := s.track("t", resumeID("mainnet", "k", "", ids), nil, nil)
	copyOf := func(id feedid.ID) feedid.ID { return feedid.ID(strings.Clone(string(id))) }
	for ts := now - 3; ts <= now; ts++ {
		var fs []*realtime.Frame
		for i, id := range ids {
			if ts%2 == 0 && i%2 == 0 {
				id = copyOf(id) // a copy of its own, every other second
			}
			fs = append(fs, &realtime.Frame{Stream: id, ObservationsTimestamp: ts + int64(100*i)})
		}
		m.written(fs)
	}
	// Older seconds, by the hub's strings and by copies: nothing rises.
	for i, id := range ids {
		if i%3 == 0 {
			id = copyOf(id)
		}
		m.mu.Lock()
		rose := m.set(string(id), now-1+int64(100*i))
		m.mu.Unlock()
		assert.False(t, rose, "stream %d: an older second", i)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	require.Len(t, m.streams, len(ids), "one place per stream")
	require.Len(t, m.addr, markScan)
	for i, id := range ids {
		assert.Equal(t, string(id), m.streams[i])
		assert.Equal(t, now+int64(100*i), m.ts[i], "stream %d: its own seconds", i)
	}
}
