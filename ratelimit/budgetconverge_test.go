package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"

	"streamgate/auth"
	"streamgate/internal/testing/redistest"
	"streamgate/upstreamsim"
)

// convergeUpstream starts a simulator on a loopback listener that allows
// limit calls a second per key and endpoint as a burst-1 bucket (the
// strictest counting), and returns it with the URL of a latest report.
func convergeUpstream(t *testing.T, limit float64) (*upstreamsim.Simulator, string) {
	t.Helper()
	cfg := upstreamsim.Default()
	cfg.RateLimit, cfg.RateMode, cfg.Burst = rate.Limit(limit), upstreamsim.RateBucket, 1
	sim, err := upstreamsim.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })
	srv := httptest.NewServer(sim.Handler(upstreamsim.Mainnet))
	t.Cleanup(srv.Close)
	streams := sim.Streams(upstreamsim.Mainnet)
	require.NotEmpty(t, streams)
	return sim, srv.URL + "/api/v1/reports/latest?feedID=" + streams[0].FeedID
}

// upstreamCall is one call a convergeDriver made: its status and the
// rate in force once it was answered (after a 429 was taken into account).
type upstreamCall struct {
	status int
	eff    float64
}

// convergeDriver spends b on the upstream at url as the gateway does:
// workers wait for the budget, call, and on a 429 pause the key for the
// upstream's Retry-After and tell the budget (Throttled). It stops after
// calls upstream calls and returns them in the order they were answered.
func convergeDriver(t *testing.T, b Budget, m *Metrics, key string, l Limit, url string, workers, calls int) []upstreamCall {
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	var (
		mu   sync.Mutex
		seen []upstreamCall
		errs []error
	)
	eff := func() float64 { return testutil.ToFloat64(m.budgetEff.WithLabelValues("mainnet", key)) }
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				done := len(seen)+len(errs) >= calls || len(errs) > 0
				mu.Unlock()
				if done {
					return
				}
				// A deadline longer than the upstream's pause: a waiter
				// sleeps through it rather than being refused.
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				err := b.Wait(ctx, key, l)
				cancel()
				if err != nil {
					if errors.Is(err, ErrBudgetExhausted) {
						continue // too late for this one: the next waits anew
					}
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				req, err := http.NewRequest(http.MethodGet, url, nil)
				require.NoError(t, err)
				auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
				resp, err := hc.Do(req)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					s, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
					b.Pause(key, max(time.Duration(s)*time.Second, time.Second))
					b.Throttled(key, l)
				}
				mu.Lock()
				seen = append(seen, upstreamCall{resp.StatusCode, eff()})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs, "the driver's calls")
	return seen
}

// TestBudgetConvergesWhateverTheError: a budget configured 10, 100 and
// 1000 times above the upstream's real limit (10 calls a second, counted
// as a burst-1 bucket), spent by callers that want more than that, learns
// the limit from the upstream's 429s: the rate in force comes within the
// limit after a bounded number of upstream calls, and once it has, few
// further calls draw a 429. Memory and Redis budgets alike.
//
// Before the rules were relative to the rate in force, the floor was the
// configured rate / 32 (312 calls a second at 1000 times too high: never
// within the limit) and each recovery step a tenth of the configured rate
// (at 10 times too high, every step overshot the limit again).
func TestBudgetConvergesWhateverTheError(t *testing.T) {
	const (
		limit   = 10.0
		margin  = 20 * time.Millisecond // the example's budget_margin
		workers = 6
		// converge bounds the upstream calls until the rate in force is
		// within the limit; after counts the calls then observed.
		converge = 80
		after    = 40
		// most429 bounds the 429s once converged: one probe of the
		// recovery that finds the limit again, and its echo.
		most429 = 3
	)
	redisURL := redistest.Start(t)
	within := func(eff float64) bool {
		return eff > 0 && interval(eff, margin) >= time.Duration(float64(time.Second)/limit)
	}
	for _, impl := range []string{"memory", "redis"} {
		for _, factor := range []float64{10, 100, 1000} {
			t.Run(fmt.Sprintf("%s/%vx", impl, factor), func(t *testing.T) {
				_, url := convergeUpstream(t, limit)
				m := newMetrics(t)
				opts := Options{Network: "mainnet", BudgetMargin: margin, Metrics: m, Prefix: fmt.Sprintf("converge%v:", factor)}
				var b Budget
				var err error
				if impl == "memory" {
					b, err = NewMemoryBudget(opts)
				} else {
					b, err = NewRedisBudget(newClient(t, redisURL), opts)
				}
				require.NoError(t, err)
				l := Limit{Rate: limit * factor, Burst: 1}
				const key = "/api/v1/reports/latest"

				calls := convergeDriver(t, b, m, key, l, url, workers, converge+after)
				at := -1 // the first call answered with the rate in force within the limit
				for i, c := range calls {
					if within(c.eff) {
						at = i
						break
					}
				}
				n429, later429 := 0, 0
				trace := ""
				for i, c := range calls {
					if c.status == http.StatusTooManyRequests {
						n429++
						if at >= 0 && i > at {
							later429++
						}
					}
					if i%10 == 0 {
						trace += fmt.Sprintf(" %d:%.3g/%d", i, c.eff, c.status)
					}
				}
				t.Logf("%d calls, %d upstream 429s; within the limit from call %d; 429s after it: %d; call:rate in force/status:%s",
					len(calls), n429, at, later429, trace)
				require.GreaterOrEqual(t, at, 0, "the rate in force came within the limit")
				assert.LessOrEqual(t, at, converge, "within the limit after at most %d upstream calls", converge)
				assert.GreaterOrEqual(t, len(calls)-at, after, "calls observed once converged")
				assert.LessOrEqual(t, later429, most429, "upstream 429s once converged")
			})
		}
	}
}
