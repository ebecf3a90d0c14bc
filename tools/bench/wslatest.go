package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"streamgate/feedid"
	"streamgate/upstreamsim"
)

// scenarioWSLatest: clients polling REST latest of streams the gateway
// carries on its upstream WebSocket (pinned): upstream latest calls once
// the streams are up, and the age of each answer.
func scenarioWSLatest(ctx context.Context, o *options) error {
	if !o.set["c"] {
		o.conc = 200
	}
	if !o.set["streams"] {
		o.streams = 100
	}
	probe, err := startStack(stackConfig{LogLevel: "off"})
	if err != nil {
		return err
	}
	feeds, err := publishingStreams(probe.sim, mainnet, o.streams, !o.set["streams"])
	probe.Close()
	if err != nil {
		return err
	}
	pinned, err := feedid.ParseAll(feeds)
	if err != nil {
		return err
	}
	s, err := startStack(stackConfig{ClientKeys: o.conc, LogLevel: o.logLevel, WS: true, WSPinned: pinned})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.warm(ctx); err != nil {
		return err
	}
	lag := make([]int64, len(feeds))
	for i, f := range feeds {
		lag[i] = lagOfStream(s.sim, mainnet, f)
	}
	client, st := newClient(o.conc), newStamps()
	// Wait (bounded) until every pinned stream is answered from the stream.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < len(feeds); {
		a, err := get(ctx, client, st, &s.clientKeys[0], s.gateway[mainnet], latestTarget(feeds[i]))
		if err != nil {
			return err
		}
		if a.status == http.StatusOK && a.header.Get("X-Cache") == "STREAM" {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answered from the stream after 20 s (X-Cache %q)", feeds[i], a.header.Get("X-Cache"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(o.out, "ws-latest: %d clients polling GET /api/v1/reports/latest of %d streams pinned on the upstream WebSocket (networks.mainnet.upstream.ws_pinned), %v, after every stream answers from the stream\n",
		o.conc, len(feeds), o.dur)
	s.resetCounters()
	type wres struct {
		n, errs int64
		status  map[int]int64
		xcache  map[string]int64
		age     histogram
		ageLag  histogram
		lat     histogram
	}
	res := make([]*wres, o.conc)
	cpu0 := processCPU()
	start := time.Now()
	stop := start.Add(o.dur)
	var wg sync.WaitGroup
	for w := range o.conc {
		r := &wres{status: map[int]int64{}, xcache: map[string]int64{}}
		res[w] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, 7))
			k := &s.clientKeys[w]
			for ctx.Err() == nil && time.Now().Before(stop) {
				i := rng.IntN(len(feeds))
				t := time.Now()
				a, err := get(ctx, client, st, k, s.gateway[mainnet], latestTarget(feeds[i]))
				if err != nil {
					r.errs++
					continue
				}
				now := time.Now()
				r.lat.record(now.Sub(t))
				r.n++
				r.status[a.status]++
				r.xcache[a.header.Get("X-Cache")]++
				var doc frameHead
				if a.status == http.StatusOK && json.Unmarshal(a.body, &doc) == nil {
					age := now.Sub(time.Unix(doc.Report.ObservationsTimestamp, 0))
					r.age.record(age)
					r.ageLag.record(age - time.Duration(lag[i])*time.Second)
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	tot := &wres{status: map[int]int64{}, xcache: map[string]int64{}}
	for _, r := range res {
		tot.n += r.n
		tot.errs += r.errs
		addCounts(tot.status, r.status)
		addCounts(tot.xcache, r.xcache)
		tot.age.merge(&r.age)
		tot.ageLag.merge(&r.ageLag)
		tot.lat.merge(&r.lat)
	}
	c := s.sim.Counters()
	calls := c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointLatest)
	fmt.Fprintf(o.out, "requests %d (%.0f/s), errors %d, statuses %s, X-Cache %s; latency p50 %s p99 %s; CPU per request %s\n",
		tot.n, float64(tot.n)/elapsed.Seconds(), tot.errs, fmtCounts(tot.status), fmtCounts(tot.xcache),
		fmtDur(tot.lat.quantile(.5)), fmtDur(tot.lat.quantile(.99)), fmtDur(time.Duration(float64(cpu)/float64(max(tot.n, 1)))))
	fmt.Fprintf(o.out, "upstream REST latest calls %d (goal 0); other upstream REST calls %d; upstream WebSocket connections open %d\n",
		calls, c.Total()-calls-c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointWS)-c.ByEndpoint(upstreamsim.Testnet, upstreamsim.EndpointWS), c.WSTotal(upstreamsim.Mainnet).Open)
	fmt.Fprintf(o.out, "answer age now − observationsTimestamp: p50 %s, p99 %s, max %s (goal p99 ≤ 1.5s); minus each stream's publication delay: p50 %s, p99 %s, max %s\n",
		fmtDur(tot.age.quantile(.5)), fmtDur(tot.age.quantile(.99)), fmtDur(tot.age.max),
		fmtDur(tot.ageLag.quantile(.5)), fmtDur(tot.ageLag.quantile(.99)), fmtDur(tot.ageLag.max))
	return nil
}
