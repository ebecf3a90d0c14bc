package proxy_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/internal/testing/testport"
	"streamgate/proxy"
	"streamgate/server/servertest"
)

// TestReadyNeedsItsOwnUpstream: a replica whose upstream is unreachable
// gets its catalog from the shared cache tier (another replica fetched
// it) and serves it, but /readyz stays 503 until its own upstream has
// answered.
func TestReadyNeedsItsOwnUpstream(t *testing.T) {
	srv := redistest.New(t)
	writer := servertest.Start(t, servertest.Options{Quiet: true, Config: sharedTier(srv)})
	require.True(t, writer.Server.Ready())
	resp, _ := servertest.Demo().Get(t, writer.Mainnet, "/api/v1/feeds") // the view it answers from, in the tier
	require.Equal(t, http.StatusOK, resp.StatusCode)

	// An upstream that refuses, for the whole test: every call to it fails.
	dead := "http://" + testport.Refusing(t).Addr()
	reader := servertest.Start(t, servertest.Options{Quiet: true, Cold: true, Simulator: writer.Sim, Config: func(c *config.Config) {
		sharedTier(srv)(c)
		c.Server.AdminListen = "127.0.0.1:0"
		for _, n := range c.Networks {
			n.Upstream.URL = dead
			n.Upstream.WSURL = ""
		}
	}})
	readyz := func() int {
		resp, err := http.Get("http://" + reader.Server.Addr("admin") + "/readyz")
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// The catalog is there, from the tier.
	// (Not servertest's Get: its t.Fatalf, in the goroutine that checks
	// the condition, would end that goroutine without an answer, and the
	// wait would run out, 30 s later, without saying why. A refused or
	// broken request ends the wait at once and fails below.)
	var getErr error
	require.Eventually(t, func() bool {
		req, err := servertest.Demo().Request(t.Context(), reader.Mainnet, "/api/v1/feeds")
		if err != nil {
			getErr = err
			return true
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			getErr = err
			return true
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "the catalog from the shared tier")
	require.NoError(t, getErr, "the reader's own listener")
	// The warm-up had the same view at hand and then asked its own
	// upstream, which failed, on every network: that is the event after
	// which it must not be ready. (Waiting a while for it not to become
	// ready instead left a probe running past the test, on a busy
	// machine, into the closed admin listener.)
	for _, network := range []string{"mainnet", "testnet"} {
		require.Eventually(t, func() bool {
			return metricSumWhere(t, reader.Registry, proxy.MetricUpstreamErrors, map[string]string{"network": network, "endpoint": "discovery"}) >= 1
		}, 30*time.Second, 20*time.Millisecond, "%s: the warm-up asked its own upstream", network)
	}
	assert.Equal(t, http.StatusServiceUnavailable, readyz(), "ready while the upstream is unreachable")
	assert.False(t, reader.Server.Ready())
}

// metricSumWhere sums the counters of name whose labels include labels.
func metricSumWhere(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
