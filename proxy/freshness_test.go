package proxy_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestFreshnessWithinBudget polls the latest report of 30 streams from 20
// clients, with the simulator enforcing its own limit of 10 requests per
// second per key and endpoint and the gateway's budget at the same 10/s:
// nobody gets a 429 (upstream or passed on), nearly every answer is a 200,
// and the data served stays a few seconds old. The bounds are generous on
// purpose (a busy machine must not flake it); BENCHMARKS.md has the figures.
func TestFreshnessWithinBudget(t *testing.T) {
	env := servertest.Start(t, servertest.Options{
		Quiet: true,
		Sim:   func(c *upstreamsim.Config) { c.RateLimit, c.Burst = 10, 10 },
		Config: func(c *config.Config) {
			c.Auth.ReplayProtection = false // identical polls are signed in the same millisecond
			c.Realtime.LatestFromStream = false
			for _, n := range c.Networks {
				n.Upstream.Budget = config.Rate{RPS: 10, Burst: 10}
			}
		},
	})
	var feeds []string
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if s.Status == "live" && s.DecommissionedAt == nil && len(feeds) < 30 {
			feeds = append(feeds, s.FeedID)
		}
	}
	require.Len(t, feeds, 30)

	const clients, perClient = 20, 60
	var (
		mu       sync.Mutex
		statuses = map[int]int{}
		ages     []int64
	)
	c := servertest.Demo()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for j := range perClient {
				feed := feeds[(i*7+j)%len(feeds)]
				resp, body := c.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+feed)
				var rb reportBody
				age := int64(-1)
				if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &rb) == nil {
					age = time.Now().Unix() - rb.Report.ObservationsTimestamp
				}
				mu.Lock()
				statuses[resp.StatusCode]++
				if age >= 0 {
					ages = append(ages, age)
				}
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	total := clients * perClient
	t.Logf("statuses %v over %d requests", statuses, total)
	assert.Zero(t, statuses[http.StatusTooManyRequests], "no 429 reaches a client")
	assert.Zero(t, env.Sim.Counters().ByStatus(http.StatusTooManyRequests), "the upstream never answered 429: the budget held")
	assert.GreaterOrEqual(t, float64(statuses[http.StatusOK]), 0.98*float64(total), "nearly every answer is a 200")
	require.NotEmpty(t, ages)
	slices.Sort(ages)
	p99 := ages[len(ages)*99/100]
	t.Logf("age of the data served: p50 %ds, p99 %ds", ages[len(ages)/2], p99)
	assert.LessOrEqual(t, p99, int64(8), "the data served stays a few seconds old")
}
