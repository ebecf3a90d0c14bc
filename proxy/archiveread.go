package proxy

import (
	"context"
	"math"

	"streamgate/archive"
	"streamgate/feedid"
	"streamgate/realtime"
)

// The archive as the real-time hub reads it for a resume or a since
// (realtime.Config.Archive): a range of one stream's seconds, read in
// pages, each report verified again under the rules in force and wrapped
// as the stream's frame, with the coverage that tells which of the other
// seconds have no report upstream.

// archiveReadPage is how many reports one read of a range takes.
const archiveReadPage = 1000

// ArchiveRange returns what the real-time hub of stream partition part of
// network name ("" the network's own) reads the archive with before it
// fetches a resume's seconds from the upstream (realtime.Config.Archive);
// nil when the gateway keeps no archive (UseArchive, called before the
// hubs start) or does not serve name or part. It reads the partition's
// reports, those fetched under the credential its connections are opened
// with.
func (g *Gateway) ArchiveRange(name, part string) realtime.ArchiveSource {
	n := g.networks[name]
	if n == nil || n.report.arch == nil {
		return nil
	}
	cred := n.partitionCred(part)
	if cred == nil {
		return nil
	}
	t := n.report.arch
	return func(ctx context.Context, feed feedid.ID, lo, hi int64) ([][]byte, []realtime.ArchiveSpan, error) {
		return t.frames(ctx, cred, feed, lo, hi)
	}
}

// frames returns the reports of feed in [lo, hi] that the archive holds,
// within the retention, as stream frames in ascending order, and the
// spans of its coverage there, cut to [lo, hi] and to what was read. A
// report that does not verify is left out, and its second out of the
// coverage, so that it is fetched (and judged) like any missing second.
// Each read is bounded by ReadTimeout; an error returns what was read
// before it.
func (t *archiveTier) frames(ctx context.Context, cred *credential, feed feedid.ID, lo, hi int64) ([][]byte, []realtime.ArchiveSpan, error) {
	b, network := t.backend(cred)
	lo, hi = max(lo, t.cutoff(), 0), min(hi, math.MaxUint32)
	if b == nil || lo > hi {
		return nil, nil, nil
	}
	rctx, cancel := t.readContext(ctx)
	spans, err := b.store.Coverage(rctx, network, feed, uint32(lo), uint32(hi))
	cancel()
	t.a.read(err)
	if err != nil {
		return nil, nil, err
	}
	var frames [][]byte
	var refused []int64 // seconds whose report did not verify
	read := lo - 1      // the last second read
	for read < hi {
		rctx, cancel := t.readContext(ctx)
		rs, err := b.store.Page(rctx, network, feed, uint32(read+1), archiveReadPage)
		cancel()
		t.a.read(err)
		if err != nil {
			return frames, cutSpans(spans, lo, read, refused), err
		}
		for i := range rs {
			ts := int64(rs[i].ObservationsTimestamp)
			if ts > hi {
				break
			}
			if t.verified(&rs[i]) {
				frames = append(frames, streamFrame(rs[i].JSON()))
			} else {
				refused = append(refused, ts)
			}
		}
		if len(rs) < archiveReadPage || int64(rs[len(rs)-1].ObservationsTimestamp) >= hi {
			read = hi
		} else {
			read = int64(rs[len(rs)-1].ObservationsTimestamp)
		}
	}
	return frames, cutSpans(spans, lo, hi, refused), nil
}

// cutSpans returns the coverage spans cut to [lo, hi], without the
// seconds refused (ascending).
func cutSpans(spans []archive.Span, lo, hi int64, refused []int64) []realtime.ArchiveSpan {
	var out []realtime.ArchiveSpan
	for _, sp := range spans {
		from, to := max(int64(sp.From), lo), min(int64(sp.To), hi)
		for _, r := range refused {
			if r < from || r > to {
				continue
			}
			if r > from {
				out = append(out, realtime.ArchiveSpan{From: from, To: r - 1})
			}
			from = r + 1
		}
		if from <= to {
			out = append(out, realtime.ArchiveSpan{From: from, To: to})
		}
	}
	return out
}
