package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"streamgate/upstreamsim"
)

// scenarioLatest: N clients polling latest for M streams; upstream calls
// against the ideal of one per stream per latest_ttl.
func scenarioLatest(ctx context.Context, o *options) error {
	if !o.set["c"] {
		o.conc = 200
	}
	if !o.set["d"] {
		o.dur = 30 * time.Second
	}
	s, err := startWarmStack(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
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
	calls := c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest)
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
