package proxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/don"
)

// The shared cache tier (cache/shared) behind the in-memory cache: the
// Store's LoadFrom asks it in every fill of a cached endpoint; it answers
// from the entry another replica fetched, or fills under the key's lease
// and writes the entry for the others. A hit in memory never reaches it.
// The Checks here (each kind's codec) rebuild what an entry's value held
// (it is never stored) and validate a stored entry as the fill validates
// an upstream answer; an entry that fails is dropped and counted by the
// tier.

// errStoredEntry is the error of a Check that refuses a stored entry.
var errStoredEntry = errors.New("proxy: stored entry does not hold what its key names")

// Every report read from the shared tier is verified as it enters this
// replica (don.EntryShared): whoever can write to the cache Redis cannot
// have a report served that the DON did not sign. In mode enforce such an
// entry is refused (dropped and counted by the tier, and filled again from
// the upstream); in mode report it is served and counted.

// storedReport checks a stored report at a timestamp: the report of feed
// at ts.
func (c *checker) storedReport(feed string, ts int64) cache.Check {
	return func(e *cache.Entry) error {
		rd, _, err := parseReport(e.Body, feed, ts)
		if err != nil {
			return c.storedError(err)
		}
		if c.verifyDoc(don.EntryShared, rd) != nil {
			return errStoredEntry
		}
		return nil
	}
}

// maxWriterAhead is how far in the future of this replica's clock a stored
// entry's Stored may lie before its writer's clock is taken to be wrong.
const maxWriterAhead = time.Second

// The times of a stored entry are its writer's: a replica whose clock is
// ahead, or whose lifetimes are longer, would otherwise have its entries
// served here as fresh, with Age 0, for its own lifetime. The reader bounds
// them by its own clock and lifetimes (and a latest entry by its report's
// observation time): Stored not after now, Expires and StaleUntil not
// beyond this replica's lifetimes from Stored.

// check checks a stored latest entry, a report of feed, rebuilds
// its value, the report's observationsTimestamp, and bounds its times:
// Stored between the report's observation and now (the observation when
// the writer's clock is ahead), fresh for latest_ttl and stale for
// latest_max_stale from it at most.
func (l *latestEntries) check(feed string) cache.Check {
	return func(e *cache.Entry) error {
		rd, _, err := parseReport(e.Body, feed, anySecond)
		if err != nil {
			return l.records.storedError(err)
		}
		if e.Expires.IsZero() || l.records.verifyDoc(don.EntryShared, rd) != nil {
			return errStoredEntry
		}
		latestKind.With(e, rd.ObservationsTimestamp)
		pol, now := l.pol.Load(), l.now()
		observed := time.Unix(rd.ObservationsTimestamp, 0)
		stored := e.Stored
		if stored.After(now.Add(maxWriterAhead)) {
			stored = observed // the writer's clock is ahead: when it was fetched is unknown
		}
		stored = timeMax(stored, observed) // fetched after it was observed
		stored = timeMin(stored, now)
		bound(e, stored, stored.Add(pol.latestTTL), pol.latestMaxStale)
		return nil
	}
}

// bound sets e.Stored and brings Expires and StaleUntil to at most expires
// and expires + stale (no stale serving when stale is 0).
func bound(e *cache.Entry, stored, expires time.Time, stale time.Duration) {
	e.Stored = stored
	e.Expires = timeMin(e.Expires, expires)
	if stale > 0 {
		e.StaleUntil = timeMin(e.StaleUntil, e.Expires.Add(stale))
	} else {
		e.StaleUntil = time.Time{}
	}
}

func timeMin(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func timeMax(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// storedPage checks a stored page: reports of feed from start, in order.
func (c *checker) storedPage(feed string, start int64) cache.Check {
	return func(e *cache.Entry) error {
		recs, _, err := parsePage(e.Body, feed, start)
		if err != nil {
			return c.storedError(err)
		}
		if c.verifyAll(don.EntryShared, recs) != nil {
			return errStoredEntry
		}
		return nil
	}
}

// check rebuilds a stored catalog view's parsed form and bounds its times
// by this replica's catalog_ttl: Stored not after now (a writer whose
// clock is ahead leaves it expired), fresh until 80 % of catalog_ttl from
// it at most, as fill makes them.
func (c *catalogViews) check(e *cache.Entry) error {
	pv, err := parseView(e.Body)
	if err != nil || e.Expires.IsZero() {
		return errStoredEntry
	}
	ttl, now := c.pol.Load().catalogTTL, c.now()
	// A writer's lifetime may be the upstream's shorter max-age: keep it.
	life := min(e.Expires.Sub(e.Stored)*10/8, ttl)
	stored := e.Stored
	if stored.After(now.Add(maxWriterAhead)) {
		stored = now.Add(-ttl) // the writer's clock is ahead: treat as expired
	}
	stored = timeMin(stored, now)
	e.Stored = stored
	e.Expires = timeMin(e.Expires, stored.Add(life*8/10))
	e.StaleUntil = timeMin(e.StaleUntil, stored.Add(life+catalogStale))
	viewKind.With(e, pv)
	// The fill refreshes from 80 % of the advertised lifetime on: the
	// lifetime ends a quarter of that after Expires.
	pv.entry, pv.expires = e, e.Expires.Add(e.Expires.Sub(e.Stored)/4)
	return nil
}

// storedBulk checks a stored bulk chunk (the upstream's answer for exactly
// feeds at ts) and rebuilds its split reports.
func (c *checker) storedBulk(feeds []string, ts int64) cache.Check {
	return func(e *cache.Entry) error {
		reports, recs, err := parseBulk(e.Body, feeds, ts)
		if err != nil {
			return c.storedError(err)
		}
		if c.verifyAll(don.EntryShared, recs) != nil {
			return errStoredEntry
		}
		bulkKind.With(e, reports)
		return nil
	}
}

// sharedChunk answers a bulk chunk from the reports other replicas stored,
// when every stream of it is there (in one round trip), and keeps them in
// memory too; else nil.
func (s *bulkSource) sharedChunk(ctx context.Context, cred *credential, feeds []string, ts int64) *cache.Entry {
	if s.shared == nil {
		return nil
	}
	keys := make([]string, len(feeds))
	byKey := make(map[string]string, len(feeds))
	for i, f := range feeds {
		keys[i] = cache.ReportKey(s.network, cred.scope, f, ts)
		byKey[keys[i]] = f
	}
	found := s.shared.GetMany(ctx, keys, func(key string) shared.Check { return s.records.storedReport(byKey[key], ts) })
	reports := make(map[string][]byte, len(feeds))
	for i, e := range found {
		if e == nil {
			return nil
		}
		reports[feeds[i]] = reportPayload(e.Body)
	}
	for i, e := range found {
		s.store.Set(keys[i], e)
	}
	s.store.Wait() // visible before the answer goes out: the next ask is a hit
	return bulkKind.With(&cache.Entry{Status: http.StatusOK, Stored: s.now(), NoStore: true}, reports)
}

// shareReports writes reports at ts (records by stream) to the shared tier,
// in one round trip.
func (s *bulkSource) shareReports(ctx context.Context, cred *credential, ts int64, reports map[string][]byte, now time.Time) {
	if s.shared == nil || len(reports) == 0 {
		return
	}
	entries := make(map[string]*cache.Entry, len(reports))
	for f, rep := range reports {
		entries[cache.ReportKey(s.network, cred.scope, f, ts)] = &cache.Entry{Status: http.StatusOK, Body: reportBody(rep), Stored: now}
	}
	s.shared.SetMany(ctx, entries)
}

// takeShared finishes the refreshes whose stream another replica has
// refreshed (a fresh latest entry in the shared tier), before a budget token
// is spent on them, and returns the others.
func (rf *refresher) takeShared(items []*refreshItem) []*refreshItem {
	if rf.shared == nil || len(items) == 0 {
		return items
	}
	keys := make([]string, len(items))
	byKey := make(map[string]string, len(items))
	for i, it := range items {
		keys[i] = cache.LatestKey(rf.network, rf.org.scope, it.feed)
		byKey[keys[i]] = it.feed
	}
	found := rf.shared.GetMany(rf.ctx, keys, func(key string) shared.Check { return rf.entries.check(byKey[key]) })
	rest := items[:0:0]
	for i, it := range items {
		if found[i] == nil {
			rest = append(rest, it)
			continue
		}
		rf.metrics.refresh(rf.network, "shared", "ok")
		rf.finish(it, found[i], nil)
	}
	return rest
}

// The lead of a network's latest refreshes among the replicas: the leader
// refreshes a stale latest entry at once; the others leave it the grace
// first (serving the stale entry meanwhile), so that one replica's
// refresher holds most pending streams and batches them into bulk calls as
// a lone replica would, instead of each replica refreshing a share of them
// with more, smaller calls. A replica that alone sees a stream's demand
// refreshes it after the grace.
const (
	leadInterval = time.Second // how often the lead is renewed or sought
	leadTTL      = 3 * leadInterval
	maxGrace     = 100 * time.Millisecond
	minGrace     = 10 * time.Millisecond
)

// lead seeks or renews this replica's lead of the network's refreshes
// until the refresher closes.
func (rf *refresher) lead() {
	defer rf.wg.Done()
	tick := time.NewTicker(leadInterval)
	defer tick.Stop()
	name := "refresh/" + rf.network
	for {
		ctx, cancel := context.WithTimeout(rf.ctx, time.Second)
		rf.leader.Store(rf.shared.Lead(ctx, name, name, leadTTL))
		cancel()
		select {
		case <-rf.ctx.Done():
			if rf.leader.Load() {
				// Leave at once, so that another replica leads from its
				// next try instead of after leadTTL.
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				rf.shared.Resign(ctx, name, name)
				cancel()
			}
			return
		case <-tick.C:
		}
	}
}

// grace is how long this replica leaves a stale latest entry's refresh to
// the leader: none when it leads (or without the shared tier), else a
// fifth of latest_ttl within [10ms, 100ms].
func (rf *refresher) grace() time.Duration {
	if rf.shared == nil || rf.leader.Load() {
		return 0
	}
	return min(max(rf.pol.Load().latestTTL/5, minGrace), maxGrace)
}
