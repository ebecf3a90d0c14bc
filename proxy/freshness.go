package proxy

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/internal/apierror"
	"streamgate/ratelimit"
)

// Freshness of latest within the upstream's budget.
//
// A latest entry is fresh for latest_ttl, then answered stale for up to
// latest_max_stale while its refresh is scheduled here. The refresher of a
// network keeps the streams that need a refresh and two workers that spend
// the budget on them: one makes single latest calls (each costs a token of
// the latest endpoint and gives the newest report), the other, with
// latest_bulk_refresh, one bulk call at a recent second for up to max_bulk
// streams (a token of the bulk endpoint's own budget for many streams; a
// stream not yet published at that second stays for the single worker).
// Each call waits for its token, so the upstream never gets more than the
// budget. Which streams go first: those a client is waiting on (nothing
// held), then those asked for most since they went stale, then the oldest;
// taken round robin over the teams that asked, so that one team's polling
// cannot starve another's streams.

// bulkLag is how far behind the current second a bulk refresh asks: most
// streams have published their report by then.
const bulkLag = time.Second

// refresher schedules the latest refreshes of one network (organisation
// credential only: a team with its own upstream credential refreshes on
// its own, as before).
type refresher struct {
	refreshDeps
	bulk   bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{}

	mu       sync.Mutex
	pending  map[string]*refreshItem // by feed
	lastTeam string                  // round robin position

	// leader is set while this replica leads the network's refreshes
	// among the replicas sharing the cache tier (shared.go).
	leader atomic.Bool
}

// refreshDeps is what a refresher is given: the network's upstream and
// organisation credential, the checks and the latest entries it makes,
// the shared tier (for the streams another replica refreshed, and the
// lead), the policy in force and the metrics.
type refreshDeps struct {
	network string
	org     *credential
	maxBulk int
	up      *upstream
	records *checker
	entries *latestEntries
	store   *cache.Store
	shared  *shared.Tier // nil: off
	pol     *atomic.Pointer[policy]
	metrics *Metrics
	now     func() time.Time
}

// refreshItem is one stream waiting for its refresh.
type refreshItem struct {
	feed     string
	enqueued time.Time
	waited   bool           // a client has nothing held and waits for it
	asks     int            // requests since it went stale
	teams    map[string]int // who asked, and how often
	inFlight bool
	noBulk   time.Time // not in a bulk call before then: the last one lacked it
	done     chan struct{}
	entry    *cache.Entry
	err      error
}

func newRefresher(deps refreshDeps, bulk bool) *refresher {
	ctx, cancel := context.WithCancel(context.Background())
	rf := &refresher{refreshDeps: deps, bulk: bulk, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), pending: map[string]*refreshItem{}}
	rf.wg.Add(1)
	go rf.work(false)
	if bulk {
		rf.wg.Add(1)
		go rf.work(true)
	}
	if rf.shared != nil {
		rf.wg.Add(1)
		go rf.lead()
	}
	return rf
}

func (rf *refresher) close() {
	rf.cancel()
	rf.wg.Wait()
}

// ask counts a request for feed by team while its refresh is pending.
func (rf *refresher) ask(feed, team string) {
	rf.mu.Lock()
	if it := rf.pending[feed]; it != nil {
		it.asks++
		it.teams[team]++
	}
	rf.mu.Unlock()
}

// refresh is the fill of a latest entry: it queues feed (or joins its
// queued refresh) and waits for the worker that serves it.
func (rf *refresher) refresh(ctx context.Context, feed, team string, waited bool) (*cache.Entry, error) {
	rf.mu.Lock()
	it := rf.pending[feed]
	if it == nil {
		it = &refreshItem{feed: feed, enqueued: time.Now(), teams: map[string]int{}, done: make(chan struct{})}
		rf.pending[feed] = it
	}
	it.waited = it.waited || waited
	it.teams[team]++
	rf.mu.Unlock()
	select {
	case rf.wake <- struct{}{}:
	default:
	}
	select {
	case <-it.done:
		return it.entry, it.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-rf.ctx.Done():
		return nil, errors.New("proxy: gateway closing")
	}
}

// work is a worker: single latest calls, or bulk calls.
func (rf *refresher) work(bulk bool) {
	defer rf.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond) // a wake-up may be taken by the other worker
	defer tick.Stop()
	for rf.ctx.Err() == nil {
		picked := rf.pick(bulk)
		if len(picked) == 0 {
			select {
			case <-rf.ctx.Done():
				return
			case <-rf.wake:
			case <-tick.C:
			}
			continue
		}
		// Streams another replica refreshed meanwhile cost no token.
		items := rf.takeShared(picked)
		if len(items) == 0 {
			continue
		}
		if bulk {
			if !rf.fetchBulk(items) {
				// The bulk call failed (its budget, the upstream): leave
				// the streams to the single worker for a moment.
				select {
				case <-rf.ctx.Done():
				case <-time.After(250 * time.Millisecond):
				}
			}
		} else {
			rf.fetchOne(items[0])
		}
	}
}

// pick takes the next items to refresh: one for the single worker, up to
// max_bulk for the bulk worker (which leaves a lone item to the single
// worker, whose call gives the newest report).
func (rf *refresher) pick(bulk bool) []*refreshItem {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	byTeam := map[string][]*refreshItem{}
	free := 0
	now := time.Now()
	for _, it := range rf.pending {
		if it.inFlight || bulk && now.Before(it.noBulk) {
			continue
		}
		free++
		// An item belongs to the team that asked for it most.
		best, bestN := "", -1
		for team, n := range it.teams {
			if n > bestN || n == bestN && team < best {
				best, bestN = team, n
			}
		}
		byTeam[best] = append(byTeam[best], it)
	}
	if free == 0 || bulk && free < 2 {
		return nil
	}
	teams := make([]string, 0, len(byTeam))
	for team, items := range byTeam {
		teams = append(teams, team)
		slices.SortFunc(items, func(a, b *refreshItem) int {
			switch {
			case a.waited != b.waited:
				if a.waited {
					return -1
				}
				return 1
			case a.asks != b.asks:
				return cmp.Compare(b.asks, a.asks)
			}
			return a.enqueued.Compare(b.enqueued)
		})
	}
	slices.Sort(teams)
	// Round robin over the teams, starting after the last one served.
	start, _ := slices.BinarySearch(teams, rf.lastTeam)
	if start < len(teams) && teams[start] == rf.lastTeam {
		start++
	}
	want := 1
	if bulk {
		want = max(rf.maxBulk, 1)
	}
	var out []*refreshItem
	for round := 0; len(out) < want; round++ {
		took := false
		for k := range teams {
			team := teams[(start+k)%len(teams)]
			if round < len(byTeam[team]) && len(out) < want {
				out = append(out, byTeam[team][round])
				rf.lastTeam = team
				took = true
			}
		}
		if !took {
			break
		}
	}
	for _, it := range out {
		it.inFlight = true
	}
	return out
}

// finish ends items with their outcome.
func (rf *refresher) finish(it *refreshItem, e *cache.Entry, err error) {
	rf.mu.Lock()
	delete(rf.pending, it.feed)
	rf.mu.Unlock()
	it.entry, it.err = e, err
	rf.metrics.refreshWait(rf.network, time.Since(it.enqueued))
	close(it.done)
}

// requeue gives items back to the queue; with noBulk, bulk calls leave
// them to the single worker for a second (a bulk answer lacked them).
func (rf *refresher) requeue(items []*refreshItem, noBulk bool) {
	rf.mu.Lock()
	for _, it := range items {
		it.inFlight = false
		if noBulk {
			it.noBulk = time.Now().Add(time.Second)
		}
	}
	rf.mu.Unlock()
	select {
	case rf.wake <- struct{}{}:
	default:
	}
}

func (rf *refresher) fetchOne(it *refreshItem) {
	resp, err := rf.up.fetch(rf.ctx, nil, "latest", "/api/v1/reports/latest?feedID="+it.feed, rf.org, http.StatusOK)
	if err != nil {
		rf.metrics.refresh(rf.network, "latest", refreshResult(err))
		rf.finish(it, nil, latestError(err))
		return
	}
	doc, body, err := rf.records.checkReport(resp.body, "latest", it.feed, anySecond, true)
	if err != nil {
		rf.finish(it, nil, err)
		return
	}
	rf.metrics.refresh(rf.network, "latest", "ok")
	rf.finish(it, rf.entries.entry(rf.org, it.feed, doc, body), nil)
}

// fetchBulk refreshes items with one bulk call; it reports false when the
// call failed and every item went back to the queue.
func (rf *refresher) fetchBulk(items []*refreshItem) bool {
	feeds := make([]string, len(items))
	for i, it := range items {
		feeds[i] = it.feed
	}
	ts := time.Now().Add(-bulkLag).Unix()
	target := "/api/v1/reports/bulk?feedIDs=" + strings.Join(feeds, ",") + "&timestamp=" + strconv.FormatInt(ts, 10)
	resp, err := rf.up.fetch(rf.ctx, nil, "bulk", target, rf.org, http.StatusOK, http.StatusPartialContent)
	if err != nil {
		// The bulk budget or the bulk call failed: the single worker
		// takes them.
		rf.metrics.refresh(rf.network, "bulk", refreshResult(err))
		rf.requeue(items, false)
		return false
	}
	reports, err := rf.records.splitBulk(resp.body, feeds, ts)
	if err != nil {
		rf.requeue(items, false)
		return false
	}
	var missing []*refreshItem
	for _, it := range items {
		raw, ok := reports[it.feed]
		if !ok {
			missing = append(missing, it)
			continue
		}
		doc, body, err := rf.records.checkReport(reportBody(raw), "bulk", it.feed, ts, false) // splitBulk verified it
		if err != nil {
			missing = append(missing, it)
			continue
		}
		// The report at that second is also stored as such.
		rf.store.Set(cache.ReportKey(rf.network, "", it.feed, doc.ObservationsTimestamp), &cache.Entry{Status: http.StatusOK, Body: body, Stored: rf.now()})
		rf.metrics.refresh(rf.network, "bulk", "ok")
		rf.finish(it, rf.entries.entry(rf.org, it.feed, doc, body), nil)
	}
	if len(missing) > 0 {
		rf.metrics.refresh(rf.network, "bulk", "not_published")
		rf.requeue(missing, true)
	}
	return true
}

// refreshResult is a bounded label for a failed refresh.
func refreshResult(err error) string {
	var (
		be *ratelimit.BudgetError
		ua *upstreamAnswer
	)
	switch {
	case errors.As(err, &be):
		return "budget"
	case errors.As(err, &ua) && ua.status == http.StatusTooManyRequests:
		return "upstream_429"
	case errors.As(err, &ua):
		return "upstream_error"
	}
	return "error"
}

// latestError turns an upstream 429 for latest into a 503 of the gateway's:
// the budget is the gateway's business, and a client never sees the
// upstream's 429 for it.
func latestError(err error) error {
	var ua *upstreamAnswer
	if errors.As(err, &ua) && ua.status == http.StatusTooManyRequests {
		return &apierror.Error{Status: http.StatusServiceUnavailable, Msg: "no fresh report yet within the upstream's rate budget: retry after the time in Retry-After", RetryAfter: max(ua.retryAfter, time.Second)}
	}
	return err
}
