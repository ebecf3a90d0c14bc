package proxy

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/archive"
	"streamgate/cache"
	"streamgate/config"
	"streamgate/don"
	"streamgate/feedid"
)

// The durable archive (package archive) as the report sources use it: a
// tier behind the memory cache and the shared tier, before the upstream.
// The order memory → shared tier → archive → upstream has one owner, the
// cache Store's LoadFrom: the archive is asked inside the fill that
// LoadFrom runs when neither memory nor the shared tier holds the key
// (archiveFirst), and what it answers is kept in both, as an upstream
// answer is. Bulk asks it for the streams memory did not hold, in one
// read, before its chunks' flights.
//
// Only what passed verification under the rules in force enters it
// (keep), and every report read from it is verified again as it enters
// the cache (don.EntryArchive), so that a stricter rule applies to what is
// read from then on, and whoever can write to a shared database cannot
// have a report served that the DON did not sign. The gate recovers a
// report's signatures once per its bytes and rules in force (its memo,
// filled by every entry's check, emptied by a reload), so a report read
// again, or read back after it was verified as the upstream or the
// stream brought it, costs a hash, and a row rewritten in a shared
// database, whose bytes differ, is verified anew. It serves and keeps
// the organisation's credential's answers under the network's name, and,
// with sharing: credential, each stream partition's under its label
// (network@partition, config.PartitionLabel): a team's own credential may
// be entitled upstream to streams the organisation's is not, and the
// reverse, and what was fetched under one credential is served only to
// the teams that use it. With sharing: organisation a team's own
// credential's answers are neither served from it nor kept. Reports
// observed before the retention's cutoff are neither served nor kept.
//
// A store that is down or slow never holds a request: a read has
// ReadTimeout and then the request goes on to the upstream; writes go
// through the Writer's bounded queue.

// Archive is the archive a Gateway serves from and keeps in
// (Gateway.UseArchive). Its store and writer are set with Open, when the
// store is open: until then, and after Close, the gateway goes without.
type Archive struct {
	// Retention is how long a report is served and kept, by its
	// observationsTimestamp; 0 keeps everything.
	Retention time.Duration
	// ReadTimeout bounds one read on a request's way; 0: 250 ms.
	ReadTimeout time.Duration
	// Logger receives the first failure of an episode of failed reads.
	Logger *zap.Logger

	unfaithful atomic.Bool // a record not kept for its form was logged
	cur        atomic.Pointer[archiveBackend]
	readFailed atomic.Pointer[string] // the last read's error kind, while reads fail
	opening    atomic.Pointer[string] // why the store is not open yet; nil once open

	// held are the REST answers' reports kept while the store was not
	// open yet (hold), written once it is (Open).
	held opening[heldWrite]
}

// heldWrite is one write of reports to the Writer: the reports alone, or
// with the span of stream they prove (AddCovered) when covered.
type heldWrite struct {
	reports []archive.Report
	covered bool
	network string
	stream  feedid.ID
	span    archive.Span
}

// to gives w to the Writer.
func (w *heldWrite) to(wr *archive.Writer) {
	if w.covered {
		wr.AddCovered(w.reports, w.network, w.stream, w.span)
		return
	}
	for _, r := range w.reports {
		wr.Add(r)
	}
}

// hold keeps w until the store is open (opening: at most openingMax
// reports, each beyond counted as dropped); false when there is nothing
// to wait for: the store is open now (the caller writes w itself), or
// not being opened (the archive is off, or closing).
func (a *Archive) hold(w heldWrite) bool {
	if a.opening.Load() == nil {
		return false
	}
	return a.held.hold(w, len(w.reports), a.Logger,
		"archive: not open yet, and the answers' reports held for it are at their bound; newer ones are not kept until it opens")
}

type archiveBackend struct {
	store  archive.Store
	writer *archive.Writer
}

// Open hands the archive its open store and the writer in front of it.
// What the REST answers brought while it was opening is written then.
func (a *Archive) Open(store archive.Store, writer *archive.Writer) {
	a.cur.Store(&archiveBackend{store: store, writer: writer})
	a.opening.Store(nil)
	a.held.drain(func(w heldWrite) { w.to(writer) }, writer)
}

// Waiting records why the store is not open yet (its opener tries again),
// for Health.
func (a *Archive) Waiting(why string) { a.opening.Store(&why) }

// Detach makes the gateway go without the archive from now on (before the
// store closes).
func (a *Archive) Detach() { a.cur.Store(nil) }

// Health says what is wrong with the archive now, "" when nothing is: not
// open yet, reads failing (the requests go upstream), the writer's queue
// overflowing or its store failing writes.
func (a *Archive) Health() string {
	if a == nil {
		return ""
	}
	if why := a.opening.Load(); why != nil {
		return "archive: not open (" + *why + "); every request goes to the upstream"
	}
	b := a.cur.Load()
	if b == nil {
		return ""
	}
	if k := a.readFailed.Load(); k != nil {
		return "archive: reads fail (" + *k + "); requests go to the upstream"
	}
	if h := b.writer.Health(); h != "" {
		return "archive: " + h
	}
	return ""
}

func (a *Archive) readTimeout() time.Duration {
	if a.ReadTimeout > 0 {
		return a.ReadTimeout
	}
	return 250 * time.Millisecond
}

// read notes a read's outcome for Health, logging the first failure of
// an episode and the recovery.
func (a *Archive) read(err error) {
	if err == nil {
		if a.readFailed.Load() != nil && a.readFailed.Swap(nil) != nil && a.Logger != nil {
			a.Logger.Info("archive: reads answer again")
		}
		return
	}
	kind := archive.ErrorKind(err)
	if a.readFailed.Swap(&kind) == nil && a.Logger != nil {
		a.Logger.Warn("archive: a read failed; requests go to the upstream while reads fail",
			zap.String("kind", kind), zap.Error(err))
	}
}

// UseArchive makes every network serve from a and keep in it. Call it once,
// after New and before the gateway serves a request (as Stream); a nil a
// changes nothing.
func (g *Gateway) UseArchive(a *Archive) {
	if a == nil {
		return
	}
	for _, n := range g.networks {
		t := &archiveTier{a: a, network: n.name, org: n.org, gate: n.gate, now: g.now, log: g.log}
		n.report.arch = t
		n.page.arch = t
		n.bulk.arch = t
		n.latest.arch = t
		n.latest.entries.arch = t
	}
}

// archiveTier is a network's view of the archive. A nil *archiveTier is
// no archive: every method answers nothing and keeps nothing.
type archiveTier struct {
	a       *Archive
	network string
	org     *credential
	gate    *don.Gate
	now     func() time.Time
	log     *zap.Logger
}

// backend returns the store and writer for cred and the network name its
// reports are kept under there (the network's, or its stream partition's
// label); nil when the archive is off, not open, or not for cred.
func (t *archiveTier) backend(cred *credential) (*archiveBackend, string) {
	network, ok := t.keptUnder(cred)
	if !ok {
		return nil, ""
	}
	return t.a.cur.Load(), network
}

// keptUnder returns the network name cred's reports are kept under (the
// network's, or its stream partition's label); false when the archive is
// off or not for cred.
func (t *archiveTier) keptUnder(cred *credential) (string, bool) {
	switch {
	case t == nil || cred == nil:
		return "", false
	case cred == t.org:
		return t.network, true
	case cred.part != "":
		return config.PartitionLabel(t.network, cred.part), true
	}
	return "", false
}

// write gives w to the Writer for cred's reports, or holds it while the
// store is opening (Archive.hold).
func (t *archiveTier) write(cred *credential, w heldWrite) {
	if b, _ := t.backend(cred); b != nil {
		w.to(b.writer)
		return
	}
	if t.a.hold(w) {
		return
	}
	if b, _ := t.backend(cred); b != nil { // opened meanwhile
		w.to(b.writer)
	}
}

// cutoff is the oldest observationsTimestamp served and kept.
func (t *archiveTier) cutoff() int64 {
	if t.a.Retention <= 0 {
		return 0
	}
	return t.now().Add(-t.a.Retention).Unix()
}

// inRange reports whether ts is a second the archive serves: within the
// retention and a uint32.
func (t *archiveTier) inRange(ts int64) bool {
	return ts >= t.cutoff() && ts <= math.MaxUint32
}

// verified reports whether a report read from the archive passes the rules
// in force, counted as an entry of the archive: verified, or the result
// the gate remembers for the same bytes under those rules.
func (t *archiveTier) verified(r *archive.Report) bool {
	if t.gate == nil {
		return true
	}
	_, ok := t.gate.Check(don.EntryArchive, r.Record())
	return ok
}

// readContext bounds a read by ReadTimeout.
func (t *archiveTier) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.a.readTimeout())
}

// report returns the record of feed at ts from the archive, nil when it
// holds none (or cannot be read in time, or the report does not verify).
func (t *archiveTier) report(ctx context.Context, cred *credential, feed string, ts int64) []byte {
	b, network := t.backend(cred)
	if b == nil || !t.inRange(ts) {
		return nil
	}
	ctx, cancel := t.readContext(ctx)
	r, ok, err := b.store.Get(ctx, network, feedid.ID(feed), uint32(ts))
	cancel()
	t.a.read(err)
	if err != nil || !ok || !t.verified(&r) {
		return nil
	}
	return r.JSON()
}

// reports returns the records of feeds at ts that the archive holds, by
// stream, in one read; nil when none.
func (t *archiveTier) reports(ctx context.Context, cred *credential, feeds []string, ts int64) map[string][]byte {
	b, network := t.backend(cred)
	if b == nil || len(feeds) == 0 || !t.inRange(ts) {
		return nil
	}
	ids := make([]feedid.ID, len(feeds))
	for i, f := range feeds {
		ids[i] = feedid.ID(f)
	}
	ctx, cancel := t.readContext(ctx)
	rs, err := b.store.At(ctx, network, ids, uint32(ts))
	cancel()
	t.a.read(err)
	if err != nil || len(rs) == 0 {
		return nil
	}
	out := make(map[string][]byte, len(rs))
	for i := range rs {
		if t.verified(&rs[i]) {
			out[string(rs[i].Stream)] = rs[i].JSON()
		}
	}
	return out
}

// page returns the body of the page of feed from start of limit reports
// as the upstream answers it, when the archive can answer it: limit given
// (the upstream's default is its own), limit reports held from start, and
// every second from start to the last of them inside one span of the
// stream's coverage (then the upstream has no report there that the
// archive does not hold: its page is these reports). Else nil.
func (t *archiveTier) page(ctx context.Context, cred *credential, feed string, start int64, limit int) []byte {
	b, network := t.backend(cred)
	if b == nil || limit <= 0 || !t.inRange(start) {
		return nil
	}
	ctx, cancel := t.readContext(ctx)
	defer cancel()
	rs, err := b.store.Page(ctx, network, feedid.ID(feed), uint32(start), limit)
	if err == nil && len(rs) == limit {
		var covered bool
		covered, err = archive.Covered(ctx, b.store, network, feedid.ID(feed), uint32(start), rs[limit-1].ObservationsTimestamp)
		if !covered {
			rs = nil
		}
	}
	t.a.read(err)
	if err != nil || len(rs) != limit {
		return nil
	}
	size := 16
	for i := range rs {
		size += 128 + 2*len(rs[i].FullReport)
	}
	body := append(make([]byte, 0, size), `{"reports":[`...)
	for i := range rs {
		if !t.verified(&rs[i]) {
			return nil // the rules in force refuse it: the upstream's page
		}
		if i > 0 {
			body = append(body, ',')
		}
		body = rs[i].AppendJSON(body)
	}
	return append(body, "]}"...)
}

// passed reports whether rec passed verification under the rules in force
// where it entered (mode off: nothing to pass). The verification was made
// there, and is remembered by the gate.
func (t *archiveTier) passed(rec *reportDoc) bool {
	v := t.gate.Verification(*rec)
	return v.Mode == don.ModeOff || v.Result.OK()
}

// fromRecord is the archive's report of rec under network (the tier's, or
// a partition's label), whose bytes the upstream sent as raw, when it may
// be kept: verified, within the retention, and one the archive writes back
// byte for byte.
func (t *archiveTier) fromRecord(network string, rec *reportDoc, raw []byte) (archive.Report, bool) {
	if rec.ObservationsTimestamp < t.cutoff() || !t.passed(rec) {
		return archive.Report{}, false
	}
	r, err := archive.FromRecord(network, *rec, raw)
	if err != nil {
		// Logged once: if the upstream's form changed, nothing would be
		// kept, and an operator must know.
		if t.log != nil && t.a.unfaithful.CompareAndSwap(false, true) {
			t.log.Warn("archive: a verified report is not kept: the archive could not serve it back byte for byte (logged once)",
				zap.String("network", t.network), zap.Error(err))
		}
		return archive.Report{}, false
	}
	return r, true
}

// keep queues a report an answer brought for the archive (the record
// verified, raw its bytes as sent); it never waits.
func (t *archiveTier) keep(cred *credential, rec *reportDoc, raw []byte) {
	network, ok := t.keptUnder(cred)
	if !ok {
		return
	}
	if r, ok := t.fromRecord(network, rec, raw); ok {
		t.write(cred, heldWrite{reports: []archive.Report{r}})
	}
}

// keepRaw is keep for a record whose parse the caller did not keep (a
// bulk answer's, split by stream).
func (t *archiveTier) keepRaw(cred *credential, raw []byte) {
	if _, ok := t.keptUnder(cred); !ok {
		return
	}
	rec, err := don.ReadRecord(raw)
	if err != nil {
		return
	}
	t.keep(cred, &rec, raw)
}

// keepPage queues the reports of a page of feed from start that the
// upstream answered and that the caller found complete (it cannot change
// any more), with the span it proves: every report the upstream has from
// start to the page's last is in it, the page being the first of them in
// order. Seconds before the retention's cutoff are left out of both. A
// page with a report the archive does not keep proves no span: its
// reports are kept one by one.
func (t *archiveTier) keepPage(cred *credential, feed string, start int64, recs []reportDoc, raws [][]byte, complete bool) {
	network, ok := t.keptUnder(cred)
	if !ok || len(recs) == 0 {
		return
	}
	from := max(start, t.cutoff())
	rs := make([]archive.Report, 0, len(recs))
	whole := true
	for i := range recs {
		if recs[i].ObservationsTimestamp < from {
			continue
		}
		r, ok := t.fromRecord(network, &recs[i], raws[i])
		if !ok {
			whole = false
			continue
		}
		rs = append(rs, r)
	}
	if len(rs) == 0 {
		return
	}
	last := recs[len(recs)-1].ObservationsTimestamp
	if !complete || !whole || from > last || from > math.MaxUint32 {
		t.write(cred, heldWrite{reports: rs})
		return
	}
	t.write(cred, heldWrite{reports: rs, covered: true, network: network, stream: feedid.ID(feed),
		span: archive.Span{From: uint32(from), To: uint32(last)}})
}

// archiveFirst is the fill of a key the archive may hold: the archive's
// answer made an entry, else fill, the upstream's. hit is set when the
// archive answered, so that the request that ran the fill answers HIT.
func archiveFirst(hit *atomic.Bool, fromArchive func(ctx context.Context) []byte, entry func(body []byte) *cache.Entry,
	fill cache.FillFunc) cache.FillFunc {
	return func(ctx context.Context) (*cache.Entry, error) {
		if body := fromArchive(ctx); body != nil {
			hit.Store(true)
			return entry(body), nil
		}
		return fill(ctx)
	}
}

// archived is the outcome of a load whose fill the archive may have
// answered: the request that ran it answers from the archive, a HIT.
func archived(outcome cache.Outcome, hit *atomic.Bool) cache.Outcome {
	if outcome == cache.Miss && hit.Load() {
		return cache.Hit
	}
	return outcome
}
