package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"streamgate/upstreamsim"
)

// scenarioMiss: reports at timestamps never asked before, so that every
// request is a miss, through the gateway and to the simulator directly.
func scenarioMiss(ctx context.Context, o *options) error {
	s, err := startWarmStack(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
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
	org := []key{{ID: upstreamsim.OrgKeyID, Secret: []byte(upstreamsim.OrgKeySecret)}}
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
