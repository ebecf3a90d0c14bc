package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"streamgate/auth"
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

// sumMetric adds up a counter or gauge over regs, its samples whose label
// has value (label "" for all).
func sumMetric(regs []prometheus.Gatherer, name, label, value string) float64 {
	var sum float64
	for _, reg := range regs {
		mfs, err := reg.Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				match := label == ""
				for _, lp := range m.GetLabel() {
					match = match || lp.GetName() == label && lp.GetValue() == value
				}
				if match {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return sum
}
