package realtime

// The durable archive as a resume reads it (Config.Archive): the first
// fill of a resumed feed (resumeFill) asks it for the seconds the history
// does not hold, as one range, before the backfiller asks the upstream
// one second at a time. What the archive holds is exact: a report it holds
// at a second is the report of that second, and a second inside one of its
// coverage spans without a report is a second the upstream has none of;
// only the other seconds are fetched, charged as every fetched second is
// (FillCharge).

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"streamgate/feedid"
)

// ArchiveSpan is a span of seconds [From, To], both inclusive, for which
// the archive holds every report of a stream that the upstream has.
type ArchiveSpan struct {
	From, To int64
}

// ArchiveSource reads the durable archive (Config.Archive): the reports of
// feed in [lo, hi] that it holds, each as a frame of the stream's shape
// ({"report":{…}}, the upstream's record byte for byte), in ascending
// observationsTimestamp, verified under the rules in force; and the spans
// of its coverage of feed that intersect [lo, hi]. An error, or a read cut
// short, returns what was read before it: what is missing is fetched from
// the upstream. Safe for concurrent use.
type ArchiveSource func(ctx context.Context, feed feedid.ID, lo, hi int64) (frames [][]byte, covered []ArchiveSpan, err error)

// MaxReplay is how many reports one subscription's replay may hold beyond
// its queue (its backlog): a consumer that asks for more history than
// this, every feed together, is closed as a slow one. The endpoint refuses
// a since that asks for more.
const MaxReplay = maxBacklog

// archiveReadTimeout bounds the archive's read of one resumed feed; what
// is not read by then is fetched from the upstream.
const archiveReadTimeout = 10 * time.Second

// archived is what the archive held of a resume job's seconds: its frames
// by second, and its coverage. A nil *archived holds nothing.
type archived struct {
	frames  map[int64]*Frame
	covered []ArchiveSpan // ascending, merged by the archive
	// floor: the seconds before it that the archive does not hold are
	// not fetched (beyond the job's bound, clip).
	floor int64
}

// frame returns the archive's frame of second s, nil when it holds none.
func (a *archived) frame(s int64) *Frame {
	if a == nil {
		return nil
	}
	return a.frames[s]
}

// absent reports whether the upstream has no report at second s: s lies
// inside a coverage span and the archive holds none there.
func (a *archived) absent(s int64) bool {
	if a == nil || a.frames[s] != nil {
		return false
	}
	for _, sp := range a.covered {
		if sp.From <= s && s <= sp.To {
			return true
		}
	}
	return false
}

// skips reports whether second s is not fetched: the upstream has no
// report there (absent), or it lies beyond the bound of what is fetched
// and the archive does not hold it.
func (a *archived) skips(s int64) bool {
	if a == nil {
		return false
	}
	return a.absent(s) || s < a.floor && a.frames[s] == nil
}

// clip bounds the seconds of [lo, hi] fetched from the upstream to the
// newest bound of those the archive lacks, and returns how many are left
// out; the archive's own frames are all taken.
func (a *archived) clip(lo, hi, bound int64) int64 {
	a.floor = lo
	need := int64(0)
	for s := hi; s >= lo; s-- {
		if a.frames[s] != nil || a.absent(s) {
			continue
		}
		if need == bound {
			a.floor = s + 1
			break
		}
		need++
	}
	if a.floor == lo {
		return 0
	}
	left := int64(0)
	for s := lo; s < a.floor; s++ {
		if a.frames[s] == nil && !a.absent(s) {
			left++
		}
	}
	return left
}

// through returns the last second of the run of covered seconds right
// after t (t when t+1 is not covered): seconds that follow on from t
// whether or not they hold a report.
func (a *archived) through(t int64) int64 {
	if a == nil {
		return t
	}
	for _, sp := range a.covered {
		if sp.From <= t+1 && sp.To > t {
			t = sp.To
		}
	}
	return t
}

// gapEnd returns the last second of the gap [lo, hi] that must be fetched
// first: hi, or the second before the first coverage span that starts
// inside it.
func (a *archived) gapEnd(lo, hi int64) int64 {
	if a == nil {
		return hi
	}
	for _, sp := range a.covered {
		if sp.From > lo && sp.From <= hi {
			return sp.From - 1
		}
	}
	return hi
}

// readArchive reads, for every job that asks it (a resumed feed's first
// fill), what the archive holds of its seconds, before the round fetches
// any: the job's frames from the archive and its coverage. A job whose
// read fails is fetched whole from the upstream.
func (b *backfiller) readArchive(ctx context.Context, jobs []*fillJob) {
	if b.arch == nil {
		return
	}
	for _, j := range jobs {
		if j.arch == nil || j.lo > j.hi || !j.wanted() {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, archiveReadTimeout)
		frames, covered, err := b.arch(rctx, j.feed, j.lo, j.hi)
		cancel()
		if err != nil {
			b.c.log.Warn("resume: the archive could not be read; its seconds are fetched from the upstream",
				zap.String("stream", string(j.feed)), zap.Int64("from", j.lo), zap.Int64("to", j.hi), zap.Error(err))
		}
		j.arch.frames = make(map[int64]*Frame, len(frames))
		for _, raw := range frames {
			fr, ok := readFrame(raw)
			if !ok || fr.Stream != j.feed || fr.ObservationsTimestamp < j.lo || fr.ObservationsTimestamp > j.hi {
				continue // not a report of the seconds asked for
			}
			j.arch.frames[fr.ObservationsTimestamp] = fr
		}
		j.arch.covered = slices.DeleteFunc(slices.Clone(covered), func(sp ArchiveSpan) bool { return sp.From > sp.To })
		slices.SortFunc(j.arch.covered, func(x, y ArchiveSpan) int { return cmpInt(x.From, y.From) })
	}
}

// fromArchive returns the archive's frames at second s of feeds, for the
// jobs that read it and still want s, and feeds without them (to fetch).
func fromArchive(jobs []*fillJob, stopped []bool, s int64, feeds []feedid.ID) (map[feedid.ID]*Frame, []feedid.ID) {
	var got map[feedid.ID]*Frame
	for i, j := range jobs {
		if stopped[i] || s < j.lo || s > j.hi {
			continue
		}
		if fr := j.arch.frame(s); fr != nil && slices.Contains(feeds, j.feed) {
			if got == nil {
				got = map[feedid.ID]*Frame{}
			}
			got[j.feed] = fr
		}
	}
	if len(got) == 0 {
		return nil, feeds
	}
	rest := make([]feedid.ID, 0, len(feeds))
	for _, id := range feeds {
		if got[id] == nil {
			rest = append(rest, id)
		}
	}
	return got, rest
}

// fetchSome is fetch for feeds at second s, with held, the frames the
// archive held of other feeds there, added: no call when it held them
// all.
func (b *backfiller) fetchSome(ctx context.Context, feeds []feedid.ID, held map[feedid.ID]*Frame, s int64, wanted func(feedid.ID) bool) (map[feedid.ID]*Frame, error) {
	if len(feeds) == 0 {
		return held, nil
	}
	got, err := b.fetch(ctx, feeds, s, wanted)
	for id, fr := range held {
		got[id] = fr
	}
	return got, err
}
