package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"go.uber.org/zap"

	"streamgate/archive"
	"streamgate/cache"
	"streamgate/config"
	"streamgate/don"
	"streamgate/feedid"
	"streamgate/realtime"
)

// What feeds the archive besides the REST answers: the stream's reports
// (the hub hands each new one, realtime.Config.Frames) and an operator's
// fills (archive.Filler, through the page path).

// ArchiveFrames returns what the real-time hub of stream partition part of
// network name ("" the network's own) hands each new report to (realtime.Config.Frames): the report kept in the archive
// as a REST answer's is (verified under the rules in force, within the
// retention, the upstream's bytes), queued, never waited on, with the
// second the hub vouches it follows (Frame.Follows), so that the Writer
// records the span the two prove once it stored both
// (archive.Writer.AddFollowing). A report not kept (refused, out of the
// retention) never reaches the Writer, so the next one's claim breaks
// there. nil for a network the gateway does not serve or a partition it
// does not have. The hub's connections are its partition's credential's
// (the organisation's for ""), and so its reports are kept under its
// label (archiveTier.backend).
//
// The hubs start carrying their pinned streams at once, while a
// PostgreSQL archive is still being opened in the background (Archive.Waiting):
// what a hub hands meanwhile is held, at most openingMax, and given to
// the Writer in the order handed, before anything newer, once the archive
// is open, so that a stream is recorded from its first second, which its
// clients may already have (the hub's newest report, sent as they
// subscribe). What is beyond the bound is lost, counted as the Writer's
// drops are (archive.DropQueueFull) and logged once: the next report kept
// follows nothing the Writer stored, so a new chain starts there and its
// hole is known. opened gives the held frames to the Writer: the caller
// calls it once the archive is open (the first frame handed after does
// too), so that they are written even when the hub hands nothing more.
func (g *Gateway) ArchiveFrames(name, part string) (frames func(realtime.Frame), opened func()) {
	n := g.networks[name]
	if n == nil {
		return nil, nil
	}
	cred := n.partitionCred(part)
	if cred == nil {
		return nil, nil
	}
	q := &opening[realtime.Frame]{}
	// drain gives the held frames to the Writer if the archive is open.
	drain := func(t *archiveTier) (*archiveBackend, string) {
		b, network := t.backend(cred)
		if b != nil {
			q.drain(func(f realtime.Frame) { t.keepFrame(b, network, f) }, b.writer)
		}
		return b, network
	}
	frames = func(f realtime.Frame) {
		t := n.report.arch // set by UseArchive, before the hubs start
		for {
			b, network := drain(t)
			if b == nil {
				if t != nil && t.a.opening.Load() != nil && !q.hold(f, 1, t.log, warnOpeningFrames, zap.String("network", config.PartitionLabel(name, part))) {
					continue // opened meanwhile: the held frames are the Writer's
				}
				return
			}
			t.keepFrame(b, network, f)
			return
		}
	}
	return frames, func() { drain(n.report.arch) }
}

// warnOpeningFrames is logged once when a hub's frames held for the
// archive reach their bound.
const warnOpeningFrames = "archive: not open yet, and the stream's reports held for it are at their bound; newer ones are dropped, each a hole in its stream's coverage, until it opens"

// keepFrame queues frame, a report the hub handed, in b's Writer under
// network when it may be kept.
func (t *archiveTier) keepFrame(b *archiveBackend, network string, f realtime.Frame) {
	rec, raw, err := don.ReadReport(f.Bytes)
	if err != nil {
		return
	}
	r, ok := t.fromRecord(network, &rec, raw)
	if !ok {
		return
	}
	var follows uint32
	if f.Follows > 0 && f.Follows < int64(r.ObservationsTimestamp) {
		follows = uint32(f.Follows)
	}
	b.writer.AddFollowing(r, follows)
}

// ArchivePages returns the page source of the archive's fills
// (archive.Filler): the upstream's page of a stream through the same path
// as a client's page request (the cache, the shared tier and the archive
// first; the upstream's answer verified, kept in the caches and the
// archive, its span recorded), each upstream call waiting first for a
// token of the budget's fill share (upstream.waitFillShare), under the
// credential of the network's partition network names (a network, or a
// stream partition's label, network@partition: its credential's). Its
// reports are those the answer holds.
func (g *Gateway) ArchivePages() archive.PageSource {
	return func(ctx context.Context, network string, stream feedid.ID, start uint32, limit int) ([]archive.Report, error) {
		name, part := config.SplitPartitionLabel(network)
		n := g.networks[name]
		if n == nil {
			return nil, fmt.Errorf("proxy: archive fill: no network %q", network)
		}
		cred := n.partitionCred(part)
		if cred == nil {
			return nil, fmt.Errorf("proxy: archive fill: network %s has no stream partition %q", name, part)
		}
		s := n.page
		feed, from := string(stream), int64(start)
		target := "/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + strconv.FormatInt(from, 10) + "&limit=" + strconv.Itoa(limit)
		key := cache.PageKey(s.network, cred.scope, feed, from, limit)
		var fromArchive atomic.Bool
		e, _, err := s.store.LoadFrom(ctx, key, cache.Source{Check: s.records.storedPage(feed, from),
			Fill: archiveFirst(&fromArchive, func(ctx context.Context) []byte { return s.arch.page(ctx, cred, feed, from, limit) },
				func(body []byte) *cache.Entry {
					return &cache.Entry{Status: http.StatusOK, Body: body, Stored: s.now()}
				},
				func(ctx context.Context) (*cache.Entry, error) {
					if err := n.up.waitFillShare(ctx, cred); err != nil {
						return nil, err
					}
					return s.fill(ctx, nil, target, cred, feed, from, limit)
				})})
		if err != nil {
			return nil, err
		}
		if e.Status != http.StatusOK {
			if e.Status == http.StatusNotFound {
				return nil, nil // no report from start: an empty page
			}
			return nil, fmt.Errorf("proxy: archive fill: the upstream answered %d", e.Status)
		}
		recs, raws, err := parsePage(e.Body, feed, from)
		if err != nil {
			return nil, err
		}
		out := make([]archive.Report, 0, len(recs))
		for i := range recs {
			// Mode report serves a report that failed; a fill keeps only
			// what passed, and a page with one that did not proves no span.
			if t := n.report.arch; t == nil || !t.passed(&recs[i]) {
				return nil, fmt.Errorf("proxy: archive fill: the page from %d holds a report that did not pass verification (at %d)", start, recs[i].ObservationsTimestamp)
			}
			r, err := archive.FromRecord(network, recs[i], raws[i])
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
}
