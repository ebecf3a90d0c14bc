package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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
