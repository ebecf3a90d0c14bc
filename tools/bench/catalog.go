package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sort"
	"sync"
	"sync/atomic"

	"streamgate/upstreamsim"
)

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
	for _, x := range s.sim.Streams(upstreamsim.Mainnet) {
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
		f := c.ByEndpoint(upstreamsim.Mainnet, upstreamsim.EndpointDiscovery)
		if i == 1 {
			f = c.ByEndpoint(upstreamsim.Testnet, upstreamsim.EndpointDiscovery)
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
