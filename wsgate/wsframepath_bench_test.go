package wsgate

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/realtime"
)

// benchRecord is a stream frame of a V3 report's size (its fullReport's
// hex about 1.5 KB), for stream i at second ts.
func benchRecord(i int, ts int64) (feedid.ID, []byte) {
	id := feedid.ID(fmt.Sprintf("0x0003%060x", i))
	full := "0x" + strings.Repeat("0a1b2c3d", 184)
	return id, fmt.Appendf(nil, `{"report":{"feedID":"%s","validFromTimestamp":%d,"observationsTimestamp":%d,"fullReport":"%s"}}`, id, ts, ts, full)
}

// BenchmarkClientFramePath: what a client's writer does per batch of
// its 10 streams' frames beside the write: the watermarks (resume on).
// One op is one batch of 10 frames.
func BenchmarkClientFramePath(b *testing.B) {
	s := newResumeStore(time.Minute, 10, 100, nil, zap.NewNop(), time.Now, nil)
	defer s.close()
	m := s.track("t", "id", nil, nil)
	ts := time.Now().Unix()
	frames := make([]*realtime.Frame, 10)
	for i := range frames {
		id, raw := benchRecord(i, ts)
		frames[i] = &realtime.Frame{Stream: id, ObservationsTimestamp: ts, ValidFromTimestamp: ts, Bytes: raw}
	}
	b.ReportAllocs()
	for b.Loop() {
		m.written(frames)
	}
}

// BenchmarkResumeFlushSecond: a second of a replica with 5,000 clients of
// 10 of 90 streams each, resume on: every client written to once (every
// stream publishes on the second), then the ten flushes of that second.
// One op is that second.
func BenchmarkResumeFlushSecond(b *testing.B) {
	s := newResumeStore(time.Minute, 10000, 10000, nil, zap.NewNop(), time.Now, nil)
	s.start.Do(func() {}) // no flusher of its own: the benchmark flushes
	ts := time.Now().Unix()
	marks := make([]*resumeMark, 5000)
	for c := range marks {
		// An identity as a client's: the network, a key ID and its 10
		// streams (about 730 bytes: the maps keyed by it hash it whole).
		feeds := make([]feedid.ID, 10)
		for i := range feeds {
			feeds[i], _ = benchRecord(c%80+i, 0)
		}
		id := resumeID("mainnet", fmt.Sprintf("00000000-0000-4000-8000-c%011x", c), "", feeds)
		marks[c] = s.track("t", id, nil, nil)
	}
	streams := make([]*realtime.Frame, 90)
	batch := make([]*realtime.Frame, 10)
	b.ReportAllocs()
	for b.Loop() {
		ts++
		for i := range streams {
			id, raw := benchRecord(i, ts)
			streams[i] = &realtime.Frame{Stream: id, ObservationsTimestamp: ts, ValidFromTimestamp: ts, Bytes: raw}
		}
		for c, m := range marks {
			for i := range batch {
				batch[i] = streams[c%80+i]
			}
			m.written(batch)
		}
		for range 10 {
			s.flush()
		}
	}
}
