package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

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
	s, err := startWarmStack(ctx, o)
	if err != nil {
		return err
	}
	defer s.Close()
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
