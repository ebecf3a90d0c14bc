package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"streamgate/catalog"
	"streamgate/config"
	"streamgate/upstreamsim"
)

// The freshness scenario: clients polling REST latest at a fixed rate,
// with the simulator enforcing the upstream's published limit (10 requests
// per second per key, endpoint and network), counted in each mode of
// -rate-mode (a burst-1 bucket, a calendar second, a sliding second), and
// the gateway's budget at -budget-rps (default the same 10 per second),
// burst 10. Each load runs twice, each time on a
// stack of its own: with the gateway's stale-while-revalidate refresher as
// configured by default ("swr"), and with the settings that give the
// behaviour from before it ("before": nothing served stale, no bulk
// refresh, a request waits up to 30 s for the budget).

// freshUpstreamRate is the upstream's published limit, enforced by the
// simulator and given to the gateway as its budget.
const freshUpstreamRate = 10

// freshBehaviour is one side of the comparison.
type freshBehaviour struct {
	label string
	f     freshness
}

func freshBehaviours() []freshBehaviour {
	return []freshBehaviour{
		{"swr", freshness{MaxStale: config.DefaultLatestMaxStale, MaxWait: config.DefaultLatestMaxWait, BulkRefresh: true}},
		{"before", freshness{MaxStale: 0, MaxWait: 30 * time.Second, BulkRefresh: false}},
	}
}

// freshFeed is a stream the clients poll, on one network.
type freshFeed struct {
	network string // gateway network name
	id      string
	lag     int64 // the stream's publication delay, in seconds
}

// freshResult is what one run of one load measured.
type freshResult struct {
	label            string
	mode             upstreamsim.RateMode // how the simulator counted
	budgetRPS        float64
	clients, streams int
	window           time.Duration // the measured window: requests sent in it count
	drain            time.Duration // after the window, until its last answer
	asked, answered  int64
	errors           int64
	status           map[int]int64
	xcache           map[string]int64
	lat, age, ageLag histogram
	// Upstream calls the simulator answered during the window, by network.
	latestCalls, bulkCalls map[string]int64
	bulkStreams            int64 // stream IDs in the window's bulk calls
	upstream429            int64 // any endpoint, both networks
	warmup429              int64 // the same, before the window
	otherCalls             int64
	badFeeds               map[int]int64 // non-200 answers by index of the stream
	feeds                  []freshFeed
}

func (r *freshResult) non200() int64 { return r.asked - r.status[http.StatusOK] }

// freshClient is one client's tally.
type freshClient struct {
	asked, answered, errors int64
	status                  map[int]int64
	xcache                  map[string]int64
	lat, age, ageLag        histogram
	bad                     map[int]int64
}

// scenarioFreshness runs the loads of the freshness scenario.
func scenarioFreshness(ctx context.Context, o *options) error {
	if o.every <= 0 {
		return errors.New("-every must be positive")
	}
	type shape struct{ clients, streams int }
	loads := []shape{{50, 30}, {200, 100}}
	if o.set["c"] || o.set["streams"] {
		streams := o.streams
		if !o.set["streams"] {
			streams = 30
		}
		loads = []shape{{o.conc, streams}}
	}
	warmup := o.warmup
	if !o.set["warmup"] {
		warmup = 5 * time.Second
	}
	modes := make([]string, len(o.rateModes))
	for i, m := range o.rateModes {
		modes[i] = m.String()
	}
	fmt.Fprintf(o.out, "freshness: clients polling GET /api/v1/reports/latest, each every %v (a late answer's successor is sent at once, missed slots are skipped), %v measured after %v of the same load unmeasured; simulator rate limit %d/s per key, endpoint and network, counted as %s (bucket: burst 1); gateway budget {rps: %v, burst: %d}, budget_margin %v on both networks; realtime.latest_from_stream false; a key per client, replay protection on; latest_ttl %v\n",
		o.every, o.dur, warmup, freshUpstreamRate, strings.Join(modes, ", then "), o.budgetRPS, freshUpstreamRate, o.budgetMargin, config.DefaultLatestTTL)
	for _, b := range freshBehaviours() {
		fmt.Fprintf(o.out, "  %-6s latest_max_stale %v, latest_max_wait %v, latest_bulk_refresh %v\n", b.label, b.f.MaxStale, b.f.MaxWait, b.f.BulkRefresh)
	}
	var all []*freshResult
	for _, ld := range loads {
		feeds, note, err := freshFeeds(ld.streams)
		if err != nil {
			return err
		}
		if note != "" {
			fmt.Fprintf(o.out, "  %d streams asked: %s\n", ld.streams, note)
		}
		for _, mode := range o.rateModes {
			for _, b := range freshBehaviours() {
				r, err := runFreshness(ctx, o, b, mode, ld.clients, feeds, warmup)
				if err != nil {
					return err
				}
				printFreshResult(o, r)
				all = append(all, r)
			}
		}
	}
	printFreshTable(o, all)
	return nil
}

// freshFeeds picks n public streams that publish now: mainnet's first,
// then testnet's. When the simulator has fewer, it returns them all and
// says so.
func freshFeeds(n int) ([]freshFeed, string, error) {
	probe, err := startStack(stackConfig{LogLevel: "off"})
	if err != nil {
		return nil, "", err
	}
	defer probe.Close()
	var out []freshFeed
	count := map[string]int{}
	for _, network := range []string{"mainnet", "testnet"} {
		simNet := upstreamsim.NetworkFor(network)
		now := time.Now().Unix()
		publishing := func(_ catalog.Stream, _, last int64) bool { return last >= now-5 }
		for _, id := range publicStreams(probe.sim, simNet, n-len(out), publishing) {
			out = append(out, freshFeed{network: network, id: id, lag: lagOfStream(probe.sim, simNet, id)})
			count[network]++
		}
	}
	if len(out) == 0 {
		return nil, "", errors.New("the simulator has no public stream publishing now")
	}
	note := ""
	if count["testnet"] > 0 || len(out) < n {
		note = fmt.Sprintf("%d public streams publishing (%d on mainnet, %d on testnet: mainnet has no more)", len(out), count["mainnet"], count["testnet"])
		if len(out) < n {
			note += fmt.Sprintf("; fewer than %d, all of them used", n)
		}
	}
	return out, note, nil
}

// runFreshness runs one load on a stack of its own, with behaviour b.
func runFreshness(ctx context.Context, o *options, b freshBehaviour, mode upstreamsim.RateMode, clients int, feeds []freshFeed, warmup time.Duration) (*freshResult, error) {
	f := b.f
	s, err := startFreshStack(o, &f, mode, clients)
	if err != nil {
		return nil, err
	}
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	if err := s.warm(ctx); err != nil {
		return nil, err
	}
	// A hard bound on the run: the window, the warm-up, and the longest a
	// request may wait (latest_max_wait) with the client's own timeout.
	ctx, cancel := context.WithTimeout(ctx, warmup+o.dur+f.MaxWait+45*time.Second)
	defer cancel()

	p := &freshPoll{o: o, s: s, feeds: feeds, clients: clients, client: newClient(clients), st: newStamps(), start: time.Now()}
	p.measureFrom = p.start.Add(warmup)
	p.stop = p.measureFrom.Add(o.dur)
	r := &freshResult{label: b.label, mode: mode, budgetRPS: o.budgetRPS, clients: clients, streams: len(feeds), window: o.dur,
		feeds: feeds, badFeeds: map[int]int64{}, status: map[int]int64{}, xcache: map[string]int64{}, latestCalls: map[string]int64{}, bulkCalls: map[string]int64{}}

	counts := countFreshWindow(ctx, s, p.measureFrom, p.stop)
	tallies := make([]*freshClient, clients)
	var wg sync.WaitGroup
	for w := range clients {
		fc := &freshClient{status: map[int]int64{}, xcache: map[string]int64{}, bad: map[int]int64{}}
		tallies[w] = fc
		wg.Go(func() { fc.poll(ctx, p, w) })
	}
	wg.Wait()
	end := time.Now()
	<-counts.done
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("freshness %s, %d clients: the run did not end in time: %w", b.label, clients, err)
	}
	// Let the refresher finish what is pending before the gateway closes
	// (see stack.quiesce); if it does not settle, the stack is left
	// running rather than hang this run.
	if s.quiesce(time.Second, 20*time.Second) {
		s.Close()
	} else {
		fmt.Fprintf(o.out, "  %s, %d clients: upstream calls did not stop within 20s of the load's end; the stack is left open\n", b.label, clients)
	}
	closed = true
	r.drain = max(end.Sub(p.stop), 0)
	r.add(tallies, counts)
	return r, nil
}

// startFreshStack starts the stack of a freshness load: the simulator
// limited as mode counts, the gateway with freshness f and the budget of
// the flags, and a key per client.
func startFreshStack(o *options, f *freshness, mode upstreamsim.RateMode, clients int) (*stack, error) {
	sc := stackConfig{
		ClientKeys: clients, LogLevel: o.logLevel,
		SimRateLimit: freshUpstreamRate, SimRateMode: mode,
		Budget: config.Rate{RPS: o.budgetRPS, Burst: freshUpstreamRate}, BudgetMargin: o.budgetMargin,
		Freshness: f, NoLatestFromStream: true,
	}
	if mode == upstreamsim.RateBucket {
		sc.SimBurst = 1 // the strictest bucket
	}
	return startStack(sc)
}

// freshCounts are the simulator's counters over exactly the window.
type freshCounts struct {
	done                            chan struct{} // closed when they are taken, or ctx ended
	snap                            upstreamsim.Counters
	bulkCalls, bulkStreams, warm429 int64
}

// countFreshWindow resets the counters at measureFrom (noting the 429s of
// the warm-up) and takes them at stop.
func countFreshWindow(ctx context.Context, s *stack, measureFrom, stop time.Time) *freshCounts {
	c := &freshCounts{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		t := time.NewTimer(time.Until(measureFrom))
		select {
		case <-t.C:
			c.warm429 = s.sim.Counters().ByStatus(http.StatusTooManyRequests)
			s.resetCounters()
		case <-ctx.Done():
			t.Stop()
			return
		}
		t = time.NewTimer(time.Until(stop))
		select {
		case <-t.C:
			c.snap, c.bulkCalls, c.bulkStreams = s.sim.Counters(), s.bulk.calls.Load(), s.bulk.streams.Load()
		case <-ctx.Done():
			t.Stop()
		}
	}()
	return c
}

// freshPoll is what a freshness load's clients share.
type freshPoll struct {
	o                        *options
	s                        *stack
	feeds                    []freshFeed
	clients                  int
	client                   *http.Client
	st                       *stamps
	start, measureFrom, stop time.Time
}

// poll is client w's loop: a request every o.every until the window's
// stop, the ones sent from measureFrom on counted.
func (fc *freshClient) poll(ctx context.Context, p *freshPoll, w int) {
	k := &p.s.clientKeys[w]
	// Clients start spread over one interval; each request asks
	// for a stream drawn at random (uniformly), so that clients
	// that waited together do not move on together.
	rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(p.start.UnixNano())))
	next := p.start.Add(p.o.every * time.Duration(w) / time.Duration(p.clients))
	for ctx.Err() == nil {
		if d := time.Until(next); d > 0 {
			if !next.Before(p.stop) {
				return
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		sent := time.Now()
		if !sent.Before(p.stop) {
			return
		}
		next = next.Add(p.o.every)
		if next.Before(sent) {
			next = sent // late: the next one at once after this answer
		}
		fi := rng.IntN(len(p.feeds))
		feed := p.feeds[fi]
		a, err := get(ctx, p.client, p.st, k, p.s.gateway[feed.network], latestTarget(feed.id))
		if sent.Before(p.measureFrom) {
			continue
		}
		fc.record(ctx, sent, fi, feed, a, err)
	}
}

// record counts one answer of a request sent in the window.
func (fc *freshClient) record(ctx context.Context, sent time.Time, fi int, feed freshFeed, a *answer, err error) {
	fc.asked++
	if err != nil {
		if ctx.Err() == nil {
			fc.errors++
		}
		return
	}
	now := time.Now()
	fc.answered++
	fc.lat.record(now.Sub(sent))
	fc.status[a.status]++
	if a.status != http.StatusOK {
		fc.bad[fi]++
	}
	if xc := a.header.Get("X-Cache"); xc != "" {
		fc.xcache[xc]++
	}
	var doc frameHead
	if a.status == http.StatusOK && json.Unmarshal(a.body, &doc) == nil {
		age := now.Sub(time.Unix(doc.Report.ObservationsTimestamp, 0))
		fc.age.record(age)
		fc.ageLag.record(age - time.Duration(feed.lag)*time.Second)
	}
}

// add adds up the clients' tallies and the upstream's counts.
func (r *freshResult) add(tallies []*freshClient, c *freshCounts) {
	for _, fc := range tallies {
		r.asked += fc.asked
		r.answered += fc.answered
		r.errors += fc.errors
		addCounts(r.status, fc.status)
		addCounts(r.xcache, fc.xcache)
		addCounts(r.badFeeds, fc.bad)
		r.lat.merge(&fc.lat)
		r.age.merge(&fc.age)
		r.ageLag.merge(&fc.ageLag)
	}
	for _, network := range []string{"mainnet", "testnet"} {
		simNet := upstreamsim.NetworkFor(network)
		r.latestCalls[network] = c.snap.ByEndpoint(simNet, upstreamsim.EndpointLatest)
		r.bulkCalls[network] = c.snap.ByEndpoint(simNet, upstreamsim.EndpointBulk)
	}
	r.bulkStreams = c.bulkStreams
	r.upstream429 = c.snap.ByStatus(http.StatusTooManyRequests)
	r.warmup429 = c.warm429
	r.otherCalls = c.snap.Total() - r.latestCalls["mainnet"] - r.latestCalls["testnet"] - c.bulkCalls
}

func printFreshResult(o *options, r *freshResult) {
	secs := r.window.Seconds()
	offered := float64(r.clients) * float64(time.Second) / float64(o.every)
	fmt.Fprintf(o.out, "%s, simulator counting %s, budget %v/s, %d clients, %d streams: asked %d (%.0f/s; offered %.0f/s), answered %d (%.0f/s), errors %d, statuses %s; last answer %s after the window\n",
		r.label, r.mode, r.budgetRPS, r.clients, r.streams, r.asked, float64(r.asked)/secs, offered, r.answered, float64(r.answered)/secs, r.errors, fmtCounts(r.status), fmtDur(r.drain))
	fmt.Fprintf(o.out, "  %s non-200 %d of %d (%s%%; goal ≤ 0.1%%); 429 to clients %d; X-Cache %s\n",
		r.label, r.non200(), r.asked, pct(r.non200(), r.asked), r.status[http.StatusTooManyRequests], fmtCounts(r.xcache))
	if len(r.badFeeds) > 0 {
		idx := make([]int, 0, len(r.badFeeds))
		for i := range r.badFeeds {
			idx = append(idx, i)
		}
		sort.Slice(idx, func(a, b int) bool { return r.badFeeds[idx[a]] > r.badFeeds[idx[b]] })
		parts := make([]string, 0, 3)
		for _, i := range idx[:min(len(idx), 3)] {
			f := r.feeds[i]
			parts = append(parts, fmt.Sprintf("%s %s (publication delay %ds): %d", f.network, f.id[:min(len(f.id), 10)], f.lag, r.badFeeds[i]))
		}
		fmt.Fprintf(o.out, "  %s non-200 by stream (%d streams; most first): %s\n", r.label, len(r.badFeeds), strings.Join(parts, "; "))
	}
	fmt.Fprintf(o.out, "  %s latency p50 %s, p99 %s, max %s (goal p99 ≤ 50ms)\n",
		r.label, fmtDur(r.lat.quantile(.5)), fmtDur(r.lat.quantile(.99)), fmtDur(r.lat.max))
	fmt.Fprintf(o.out, "  %s age now − observationsTimestamp: p50 %s, p99 %s, max %s; minus the stream's publication delay: p50 %s, p99 %s\n",
		r.label, fmtDur(r.age.quantile(.5)), fmtDur(r.age.quantile(.99)), fmtDur(r.age.max), fmtDur(r.ageLag.quantile(.5)), fmtDur(r.ageLag.quantile(.99)))
	fmt.Fprintf(o.out, "  %s upstream during the warm-up: 429 %d\n", r.label, r.warmup429)
	fmt.Fprintf(o.out, "  %s upstream during the window: 429 %d (goal 0); latest calls mainnet %d, testnet %d; bulk calls mainnet %d, testnet %d (%d stream IDs); other calls %d\n",
		r.label, r.upstream429, r.latestCalls["mainnet"], r.latestCalls["testnet"], r.bulkCalls["mainnet"], r.bulkCalls["testnet"], r.bulkStreams, r.otherCalls)
}

func printFreshTable(o *options, rs []*freshResult) {
	const row = "%-6s %-8s %6s %7s %7s %8s %9s %8s %8s %8s %8s %9s %8s %6s %6s %6s  %s\n"
	fmt.Fprintln(o.out, "summary (rates per second of the window; ages now − observationsTimestamp; mode: how the simulator counted its 10/s):")
	fmt.Fprintf(o.out, row, "", "mode", "budget", "clients", "streams", "asked/s", "answers/s", "non-200", "p50", "p99", "age p50", "age p99", "latest", "bulk", "429", "w-up", "X-Cache")
	for _, r := range rs {
		secs := r.window.Seconds()
		fmt.Fprintf(o.out, row, r.label, r.mode.String(), strconv.FormatFloat(r.budgetRPS, 'g', -1, 64), strconv.Itoa(r.clients), strconv.Itoa(r.streams),
			strconv.FormatFloat(float64(r.asked)/secs, 'f', 0, 64), strconv.FormatFloat(float64(r.answered)/secs, 'f', 0, 64),
			pct(r.non200(), r.asked)+"%", fmtDur(r.lat.quantile(.5)), fmtDur(r.lat.quantile(.99)),
			fmtDur(r.age.quantile(.5)), fmtDur(r.age.quantile(.99)),
			strconv.FormatInt(r.latestCalls["mainnet"]+r.latestCalls["testnet"], 10),
			strconv.FormatInt(r.bulkCalls["mainnet"]+r.bulkCalls["testnet"], 10),
			strconv.FormatInt(r.upstream429, 10), strconv.FormatInt(r.warmup429, 10), strings.ReplaceAll(fmtCounts(r.xcache), " ", ","))
	}
}

// parseRateModes parses -rate-mode: simulator mode names, comma-separated,
// or "all".
func parseRateModes(s string) ([]upstreamsim.RateMode, error) {
	if s == "all" {
		return []upstreamsim.RateMode{upstreamsim.RateBucket, upstreamsim.RateCalendar, upstreamsim.RateSliding}, nil
	}
	var out []upstreamsim.RateMode
	for _, name := range splitList(s) {
		m, err := upstreamsim.ParseRateMode(name)
		if err != nil {
			return nil, fmt.Errorf("-rate-mode: %w", err)
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, errors.New("-rate-mode: no mode given")
	}
	return out, nil
}
