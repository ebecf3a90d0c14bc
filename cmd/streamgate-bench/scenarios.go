package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"streamgate/auth"
	"streamgate/catalog"
	"streamgate/simulator"
)

const mainnet = "mainnet"

// measure runs l once for o.warmup, unmeasured, when warm is set, then
// measured, under the CPU profile when profile is set.
func (o *options) measure(ctx context.Context, l *load, warm, profile bool) (*result, error) {
	if warm && o.warmup > 0 {
		w := *l
		w.Duration, w.MaxRequests = o.warmup, 0
		w.run(ctx)
	}
	if profile {
		if err := o.profileStart(); err != nil {
			return nil, err
		}
		defer o.profileStop()
	}
	r := l.run(ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return r, nil
}

// compare measures a and b side by side: o.rounds alternating runs of
// each, o.dur/o.rounds long (or o.maxRequests/o.rounds requests), after
// one warm-up of each. Alternating spreads any change in the machine's
// other load over both sides. Only a's runs are profiled.
func (o *options) compare(ctx context.Context, a, b *load) (*result, *result, error) {
	rounds := max(o.rounds, 1)
	for _, l := range []*load{a, b} {
		l.Duration = max(o.dur/time.Duration(rounds), time.Millisecond)
		if o.maxRequests > 0 {
			l.MaxRequests = max(o.maxRequests/int64(rounds), 1)
		}
		if o.warmup > 0 {
			w := *l
			w.Duration, w.MaxRequests = o.warmup, 0
			w.run(ctx)
		}
	}
	ra, rb := newResult(), newResult()
	for range rounds {
		r, err := o.measure(ctx, a, false, true)
		if err != nil {
			return nil, nil, err
		}
		ra.add(r)
		if r, err = o.measure(ctx, b, false, false); err != nil {
			return nil, nil, err
		}
		rb.add(r)
	}
	return ra, rb, nil
}

func (o *options) newLoad(client *http.Client, base string, keys []key, st *stamps, next func(int64, int, *rand.Rand) call) *load {
	return &load{
		Client: client, Bases: []string{base}, Keys: keys, Concurrency: o.conc,
		Duration: o.dur, MaxRequests: o.maxRequests, Next: next, Stamps: st,
	}
}

// liveStreams returns n public live streams of network whose reports cover
// the simulator's whole history, so that any timestamp of it has a report.
func liveStreams(sim *simulator.Simulator, network string, n int) ([]string, error) {
	now := time.Now().Unix()
	out := publicStreams(sim, network, n, func(s catalog.Stream, first, last int64) bool {
		return s.Status == "live" && first <= now-86400+600 && last >= now-5
	})
	if len(out) < n {
		return nil, fmt.Errorf("the simulator has %d streams with a full history on %s, %d asked for", len(out), network, n)
	}
	return out, nil
}

// publicStreams returns up to n public streams of network, in the
// simulator's order, for which keep (given the stream and the first and
// last seconds it has a report for) is true.
func publicStreams(sim *simulator.Simulator, network string, n int, keep func(s catalog.Stream, first, last int64) bool) []string {
	hidden := map[string]bool{}
	for _, id := range sim.Hidden(network) {
		hidden[id] = true
	}
	var out []string
	for _, s := range sim.Streams(network) {
		if len(out) == n {
			break
		}
		first, last, ok := sim.Window(network, s.FeedID)
		if ok && !hidden[s.FeedID] && keep(s, first, last) {
			out = append(out, s.FeedID)
		}
	}
	return out
}

func latestTarget(feed string) string { return "/api/v1/reports/latest?feedID=" + feed }

func reportTarget(feed string, ts int64) string {
	return "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10)
}

func bulkTarget(feeds []string, ts int64) string {
	return "/api/v1/reports/bulk?feedIDs=" + strings.Join(feeds, "%2C") + "&timestamp=" + strconv.FormatInt(ts, 10)
}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// get sends one signed GET (unsigned when k is nil).
func get(ctx context.Context, client *http.Client, st *stamps, k *key, base, target string) (*answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+target, nil)
	if err != nil {
		return nil, err
	}
	if k != nil {
		auth.Sign(req, k.ID, k.Secret, time.UnixMilli(st.next(0, target, time.Now())))
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}

func diff(a, b time.Duration) string {
	d := a - b
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

// scenarioMiss: reports at timestamps never asked before, so that every
// request is a miss, through the gateway and to the simulator directly.
func scenarioMiss(ctx context.Context, o *options) error {
	s, err := startStack(stackConfig{LatestTTL: o.latestTTL, ClientKeys: o.conc, LogLevel: o.logLevel})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.warm(ctx); err != nil {
		return err
	}
	feeds, err := liveStreams(s.sim, mainnet, o.streams)
	if err != nil {
		return err
	}
	// One sequence for every run: each request asks for a (stream,
	// timestamp) that no earlier request of any run asked for, so neither
	// the gateway's cache nor the simulator's memo of encoded reports
	// (shared by both runs) has it.
	now := time.Now().Unix() - 120
	span := int64(86400 - 1200)
	var seq atomic.Int64
	wrapped := atomic.Bool{}
	next := func(int64, int, *rand.Rand) call {
		i := seq.Add(1) - 1
		back := i / int64(len(feeds))
		if back >= span {
			wrapped.Store(true)
			back %= span
		}
		return call{Target: reportTarget(feeds[i%int64(len(feeds))], now-back)}
	}
	client, st := newClient(o.conc), newStamps()
	org := []key{{ID: simulator.OrgKeyID, Secret: []byte(simulator.OrgKeySecret)}}
	fmt.Fprintf(o.out, "miss: GET /api/v1/reports at a new timestamp each (every answer a cache miss) over %d streams, %d clients, %v per side, access log %s\n",
		len(feeds), o.conc, o.dur, o.logLevel)
	fmt.Fprintf(o.out, "  direct: the same requests to the simulator, signed with the organisation's key\n")
	rg, rd, err := o.compare(ctx, o.newLoad(client, s.gateway[mainnet], s.clientKeys, st, next), o.newLoad(client, s.upstream[mainnet], org, st, next))
	if err != nil {
		return err
	}
	printHeader(o.out)
	printRow(o.out, "gateway", rg)
	printRow(o.out, "direct", rd)
	printDetails(o.out, "gateway", rg)
	printDetails(o.out, "direct", rd)
	if wrapped.Load() {
		fmt.Fprintln(o.out, "  note: the run outlasted the distinct timestamps of the history; later requests repeated earlier ones")
	}
	fmt.Fprintf(o.out, "gateway/direct: throughput %s, CPU per request %s (%s); added latency (gateway minus direct) p50 %s, p90 %s, p99 %s\n",
		ratio(rg.rate(), rd.rate()),
		ratio(float64(rg.cpuPerRequest()), float64(rd.cpuPerRequest())), diff(rg.cpuPerRequest(), rd.cpuPerRequest()),
		diff(rg.Hist.quantile(.5), rd.Hist.quantile(.5)), diff(rg.Hist.quantile(.9), rd.Hist.quantile(.9)),
		diff(rg.Hist.quantile(.99), rd.Hist.quantile(.99)))
	return nil
}

// scenarioLatest: N clients polling latest for M streams; upstream calls
// against the ideal of one per stream per latest_ttl.
func scenarioLatest(ctx context.Context, o *options) error {
	if !o.set["c"] {
		o.conc = 200
	}
	if !o.set["d"] {
		o.dur = 30 * time.Second
	}
	s, err := startStack(stackConfig{LatestTTL: o.latestTTL, ClientKeys: o.conc, LogLevel: o.logLevel})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.warm(ctx); err != nil {
		return err
	}
	ttl := s.cfg.Cache.LatestTTL
	feeds, err := liveStreams(s.sim, mainnet, o.streams)
	if err != nil {
		return err
	}
	next := func(_ int64, _ int, rng *rand.Rand) call {
		return call{Target: latestTarget(feeds[rng.IntN(len(feeds))])}
	}
	fmt.Fprintf(o.out, "latest-reduction: %d clients polling GET /api/v1/reports/latest for %d streams for %v, latest_ttl %v, from a cold cache\n",
		o.conc, len(feeds), o.dur, ttl)
	s.resetCounters()
	r, err := o.measure(ctx, o.newLoad(newClient(o.conc), s.gateway[mainnet], s.clientKeys, newStamps(), next), false, true)
	if err != nil {
		return err
	}
	c := s.sim.Counters()
	calls := c.ByEndpoint(simulator.Mainnet, simulator.EndpointLatest)
	windows := int64(math.Ceil(float64(o.dur) / float64(ttl)))
	ideal := int64(len(feeds)) * windows
	printHeader(o.out)
	printRow(o.out, "gateway", r)
	printDetails(o.out, "gateway", r)
	fmt.Fprintf(o.out, "upstream latest calls %d; ideal minimum %d (%d streams × ceil(%v / %v)); calls/ideal %s\n",
		calls, ideal, len(feeds), o.dur, ttl, ratio(float64(calls), float64(ideal)))
	fmt.Fprintf(o.out, "requests served per upstream call %s (without the gateway: 1); other upstream calls %d\n",
		ratio(float64(r.Requests), float64(calls)), c.Total()-calls)
	return nil
}

// scenarioBulk: bulk requests of n streams of which k are already cached at
// the request's timestamp.
func scenarioBulk(ctx context.Context, o *options) error {
	n, k := o.bulk, o.bulkCached
	if k < 0 || k > n {
		return fmt.Errorf("-bulk-cached must be between 0 and -bulk (%d)", n)
	}
	if !o.set["n"] {
		o.maxRequests = 2000
	}
	if o.maxRequests == 0 || o.maxRequests > 80000 {
		return errors.New("bulk-reduction needs -n between 1 and 80000: each request has a timestamp of its own")
	}
	s, err := startStack(stackConfig{LatestTTL: o.latestTTL, ClientKeys: o.conc, LogLevel: o.logLevel})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.warm(ctx); err != nil {
		return err
	}
	feeds, err := liveStreams(s.sim, mainnet, max(o.streams, n))
	if err != nil {
		return err
	}
	// Request i asks for n streams, from feeds[i mod len] on, at a
	// timestamp of its own; the first k of them were fetched before.
	now := time.Now().Unix() - 300
	pick := func(i int64, m int) ([]string, int64) {
		out := make([]string, m)
		for j := range out {
			out[j] = feeds[(int(i)+j)%len(feeds)]
		}
		return out, now - i
	}
	client, st := newClient(o.conc), newStamps()
	gw := s.gateway[mainnet]
	fmt.Fprintf(o.out, "bulk-reduction: %d GET /api/v1/reports/bulk of %d streams, %d of them cached at the request's timestamp, %d clients\n",
		o.maxRequests, n, k, o.conc)
	if k > 0 {
		warm := o.newLoad(client, gw, s.clientKeys, st, func(i int64, _ int, _ *rand.Rand) call {
			f, ts := pick(i, k)
			return call{Target: bulkTarget(f, ts)}
		})
		warm.Duration = 10 * time.Minute
		w := warm.run(ctx)
		if w.ok() != o.maxRequests {
			return fmt.Errorf("warming the cache: %d of %d bulk requests answered 2xx (%s)", w.ok(), o.maxRequests, fmtCounts(w.Status))
		}
		s.store.Wait()
	}
	s.resetCounters()
	l := o.newLoad(client, gw, s.clientKeys, st, func(i int64, _ int, _ *rand.Rand) call {
		f, ts := pick(i, n)
		return call{Target: bulkTarget(f, ts)}
	})
	if !o.set["d"] {
		l.Duration = 10 * time.Minute // bounded by -n
	}
	r, err := o.measure(ctx, l, false, true)
	if err != nil {
		return err
	}
	calls, streams := s.bulk.calls.Load(), s.bulk.streams.Load()
	other := s.sim.Counters().Total() - calls
	printHeader(o.out)
	printRow(o.out, "gateway", r)
	printDetails(o.out, "gateway", r)
	req := float64(r.Requests)
	fmt.Fprintf(o.out, "upstream bulk calls per request %s (ideal 1, direct 1); upstream streams fetched per request %s (ideal %d, direct %d); streams/ideal %s\n",
		ratio(float64(calls), req), ratio(float64(streams), req), n-k, n, ratio(float64(streams)/req, float64(n-k)))
	fmt.Fprintf(o.out, "upstream streams per request vs direct: %s; other upstream calls %d\n", ratio(float64(streams)/req, float64(n)), other)
	return nil
}

// scenarioCatalog: many teams, each with its own key, sending random
// discovery filters on both networks, from a cold cache.
func scenarioCatalog(ctx context.Context, o *options) error {
	if o.teams < 1 {
		return errors.New("-teams must be positive")
	}
	s, err := startStack(stackConfig{LatestTTL: o.latestTTL, Teams: o.teams, LogLevel: o.logLevel})
	if err != nil {
		return err
	}
	defer s.Close()
	nets := []string{"mainnet", "testnet"}
	bases := []string{s.gateway["mainnet"], s.gateway["testnet"]}
	// Filter values from the catalog itself, plus one that matches nothing.
	values := map[string][]string{}
	add := func(param, v string) {
		if v != "" && !containsString(values[param], v) {
			values[param] = append(values[param], v)
		}
	}
	for _, x := range s.sim.Streams(simulator.Mainnet) {
		add("asset_class", x.AssetClass)
		add("base_asset", x.BaseAsset)
		add("quote_asset", x.QuoteAsset)
		add("feed_type", x.FeedType)
		add("attribute_type", x.AttributeType)
		add("status", x.Status)
		add("network_type", x.NetworkType)
	}
	add("base_asset", "NOPE")
	values["created_after"] = []string{"2023-01-01", "2024-06-01", "2025-01-01"}
	params := make([]string, 0, len(values))
	for p := range values {
		params = append(params, p)
	}
	sort.Strings(params)

	var views [2][3]atomic.Int64 // per network: anonymous, signed, hidden
	var mu sync.Mutex
	distinct := map[string]bool{}
	next := func(_ int64, _ int, rng *rand.Rand) call {
		netIdx := rng.IntN(2)
		c := call{Base: netIdx}
		q := url.Values{}
		path := "/api/v1/discovery"
		view := 1
		switch r := rng.IntN(100); {
		case r < 10:
			c.Anonymous, view = true, 0
		case r < 25:
			path = "/api/v1/feeds"
		}
		if path == "/api/v1/discovery" {
			for range rng.IntN(4) {
				p := params[rng.IntN(len(params))]
				vs := values[p]
				q.Set(p, vs[rng.IntN(len(vs))])
			}
		}
		if !c.Anonymous && rng.IntN(5) == 0 {
			q.Set("hidden", "true")
			view = 2
		}
		c.Target = path
		if len(q) > 0 {
			c.Target += "?" + q.Encode()
		}
		views[netIdx][view].Add(1)
		mu.Lock()
		distinct[nets[netIdx]+c.Target] = true
		mu.Unlock()
		return c
	}
	fmt.Fprintf(o.out, "catalog-reduction: %d teams (own keys; every other team limited to five streams), random discovery and feeds queries on both networks, 10%% anonymous, %d clients, %v, from a cold cache, catalog_ttl %v\n",
		o.teams, o.conc, o.dur, s.cfg.Cache.CatalogTTL)
	s.resetCounters()
	l := o.newLoad(newClient(o.conc), "", s.teamKeys, newStamps(), next)
	l.Bases = bases
	r, err := o.measure(ctx, l, false, true)
	if err != nil {
		return err
	}
	c := s.sim.Counters()
	printHeader(o.out)
	printRow(o.out, "gateway", r)
	printDetails(o.out, "gateway", r)
	var fetches, used int64
	for i, name := range nets {
		f := c.ByEndpoint(simulator.Mainnet, simulator.EndpointDiscovery)
		if i == 1 {
			f = c.ByEndpoint(simulator.Testnet, simulator.EndpointDiscovery)
		}
		u := int64(0)
		for v := range views[i] {
			if views[i][v].Load() > 0 {
				u++
			}
		}
		fetches += f
		used += u
		fmt.Fprintf(o.out, "  %s: upstream catalog fetches %d for %d views used (anonymous %d, signed %d, hidden %d requests)\n",
			name, f, u, views[i][0].Load(), views[i][1].Load(), views[i][2].Load())
	}
	fmt.Fprintf(o.out, "upstream fetches per view %s (ideal 1 per view per network per lifetime); distinct queries %d; requests per upstream fetch %s (without the gateway: 1); other upstream calls %d\n",
		ratio(float64(fetches), float64(used)), len(distinct), ratio(float64(r.Requests), float64(fetches)), c.Total()-fetches)
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// scenarioLoad: a plain load on an external gateway with the endpoint mix.
func scenarioLoad(ctx context.Context, o *options) error {
	if len(o.targets) == 0 {
		return errors.New("scenario load needs -target")
	}
	if o.keyID == "" || o.secret == "" {
		return errors.New("scenario load needs -key and -secret (or STREAMGATE_KEY and STREAMGATE_SECRET)")
	}
	for i, t := range o.targets {
		o.targets[i] = strings.TrimRight(t, "/")
	}
	k := key{ID: o.keyID, Secret: []byte(o.secret)}
	client, st := newClient(o.conc), newStamps()
	feeds := o.feeds
	if len(feeds) == 0 {
		a, err := get(ctx, client, st, &k, o.targets[0], "/api/v1/feeds")
		if err != nil {
			return err
		}
		var doc struct {
			Feeds []struct {
				FeedID string `json:"feedID"`
			} `json:"feeds"`
		}
		if a.status != http.StatusOK || json.Unmarshal(a.body, &doc) != nil {
			return fmt.Errorf("listing streams with GET /api/v1/feeds: status %d: %.200s", a.status, a.body)
		}
		for _, f := range doc.Feeds {
			if len(feeds) < o.streams {
				feeds = append(feeds, f.FeedID)
			}
		}
		if len(feeds) == 0 {
			return errors.New("GET /api/v1/feeds listed no stream for this key")
		}
	}
	bulk := min(o.bulk, len(feeds))
	// Reports and bulk ask for whole minutes of the last hour: they repeat,
	// as real traffic does, so some are cache hits.
	now := time.Now().Unix()/60*60 - 120
	next := func(_ int64, w int, rng *rand.Rand) call {
		c := call{Base: w % len(o.targets)}
		f := feeds[rng.IntN(len(feeds))]
		ts := now - 60*rng.Int64N(60)
		switch o.mix.pick(rng.IntN(o.mix.total)) {
		case "latest":
			c.Target = latestTarget(f)
		case "reports":
			c.Target = reportTarget(f, ts)
		case "bulk":
			start := rng.IntN(len(feeds))
			ids := make([]string, bulk)
			for j := range ids {
				ids[j] = feeds[(start+j)%len(feeds)]
			}
			c.Target = bulkTarget(ids, ts)
		case "page":
			c.Target = "/api/v1/reports/page?feedID=" + f + "&startTimestamp=" + strconv.FormatInt(ts, 10) + "&limit=10"
		case "discovery":
			c.Target = "/api/v1/discovery?asset_class=Crypto"
		case "feeds":
			c.Target = "/api/v1/feeds"
		}
		return c
	}
	fmt.Fprintf(o.out, "load: %s, mix %s, %d streams, bulk of %d, %d clients, %v (cpu/req is this client's alone)\n",
		strings.Join(o.targets, " "), o.mix, len(feeds), bulk, o.conc, o.dur)
	l := o.newLoad(client, "", []key{k}, st, next)
	l.Bases = o.targets
	if o.warmup > 0 {
		w := *l
		w.Duration, w.MaxRequests = o.warmup, 0
		w.run(ctx)
	}
	var before int64
	if o.control != "" {
		var err error
		if before, err = upstreamTotal(ctx, client, o.control); err != nil {
			return err
		}
	}
	r, err := o.measure(ctx, l, false, true)
	if err != nil {
		return err
	}
	printHeader(o.out)
	printRow(o.out, "target", r)
	printDetails(o.out, "target", r)
	if o.control != "" {
		after, err := upstreamTotal(ctx, client, o.control)
		if err != nil {
			return err
		}
		fmt.Fprintf(o.out, "upstream calls %d, per request %s\n", after-before, ratio(float64(after-before), float64(r.Requests)))
	}
	return nil
}

// upstreamTotal reads the request total of a streams-sim control API.
func upstreamTotal(ctx context.Context, client *http.Client, control string) (int64, error) {
	a, err := get(ctx, client, nil, nil, strings.TrimRight(control, "/"), "/counters")
	if err != nil {
		return 0, err
	}
	var doc struct {
		Total int64 `json:"total"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &doc) != nil {
		return 0, fmt.Errorf("reading %s/counters: status %d", control, a.status)
	}
	return doc.Total, nil
}
