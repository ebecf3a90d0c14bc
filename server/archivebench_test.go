package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// BenchmarkGatewayArchive: through a real gateway over loopback (signed
// requests, the whole REST path), a report at a timestamp and a page of
// 100 answered from the archive (a gateway started afresh on a Pebble
// directory that holds them: its memory cache empty, no shared tier),
// against the same requests answered from the memory cache, asked again
// right after, in the same run. First a gateway archives 12,000 reports
// (the complete pages of 100 of 12 streams over 1,000 s) and stops; the
// new one is asked each of 2,000 reports at a timestamp and 200 pages,
// every request for something it has not seen (X-Cache HIT from the
// archive), then the same requests again (HIT from memory). Then 200
// pages more, each one second later than one of the first round: none
// asked before (HIT from the archive), over reports the gateway has read
// from the archive already. Latencies are the client's: sign, send,
// answer read. Run it with -benchtime=1x.
//
// Every report read from the archive is verified as it enters (entry
// archive), unless the gateway verified the same bytes under the rules
// in force before (the gate's memo, bounded): the sub-benchmark "enforce"
// is the gateway as configured by default with a DON to trust;
// "verify-off" (verify.mode off, nothing verified anywhere) shows what
// verification costs a read. The first round's pages overlap (a start
// every 37 s, 100 reports each) and follow the reports at a timestamp
// (every fifth second): part of their reports were read before.
func BenchmarkGatewayArchive(b *testing.B) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyOff} {
		name := mode
		if mode == config.VerifyOff {
			name = "verify-off"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				gatewayArchive(b, mode)
			}
		})
	}
}

func gatewayArchive(b *testing.B, mode string) {
	sim := unlimitedSim(b)
	feeds := liveFeeds(b, sim, 12)
	dir := b.TempDir()
	start := func() *servertest.Env {
		return servertest.Start(b, servertest.Options{Simulator: sim, Quiet: true, Config: func(c *config.Config) {
			c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, dir
			c.Networks[upstreamsim.Testnet].Verify.Mode = mode
		}})
	}
	env := start()
	from := time.Now().Unix() - 1200
	const pages, limit = 10, 100
	var spans [][2]int64 // per feed: the first and last second archived
	for _, f := range feeds {
		s := from
		var last int64
		for range pages {
			var page struct {
				Reports []struct{ ObservationsTimestamp int64 }
			}
			resp, body := servertest.Demo().Get(b, env.Testnet, fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", f, s, limit))
			require.Equal(b, http.StatusOK, resp.StatusCode, string(body))
			require.NoError(b, json.Unmarshal(body, &page))
			require.Len(b, page.Reports, limit)
			last = page.Reports[limit-1].ObservationsTimestamp
			s = last + 1
		}
		require.Equal(b, from+pages*limit-1, last, "a report every second")
		spans = append(spans, [2]int64{from, last})
	}
	require.NoError(b, env.Server.FlushArchive(context.Background()))
	_ = env.Server.Close()

	env = start()
	demo := servertest.Demo()
	// Connections made and the path warmed on a request not measured.
	demo.Get(b, env.Testnet, fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[0], spans[0][0]))
	var reports, pageTargets, pagesAgain []string
	for i := range 2000 {
		f := i % len(feeds)
		ts := spans[f][0] + 1 + int64(i/len(feeds))*5 // distinct, inside the span
		reports = append(reports, fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", feeds[f], ts))
	}
	for i := range 200 {
		f := i % len(feeds)
		s := spans[f][0] + 3 + int64(i/len(feeds))*37 // not a start the first gateway asked
		pageTargets = append(pageTargets, fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feeds[f], s, limit))
		pagesAgain = append(pagesAgain, fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feeds[f], s+1, limit))
	}
	measure := func(name string, targets []string) {
		ds := make([]time.Duration, 0, len(targets))
		for _, tg := range targets {
			t0 := time.Now()
			resp, body := demo.Get(b, env.Testnet, tg)
			ds = append(ds, time.Since(t0))
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Cache") != "HIT" {
				b.Fatalf("%s: %s: %d %s %s", name, tg, resp.StatusCode, resp.Header.Get("X-Cache"), body)
			}
		}
		slices.Sort(ds)
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds()), name+"-p50-µs")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds()), name+"-p99-µs")
	}
	upBefore := env.UpstreamCalls()
	hits0 := servertest.MetricValue(b, env.Registry, "streamgate_archive_reads_total", map[string]string{"result": "hit"})
	measure("report-archive", reports)
	measure("report-memory", reports)
	measure("page100-archive", pageTargets)
	measure("page100-memory", pageTargets)
	measure("page100-archive-again", pagesAgain)
	if n := env.UpstreamCalls() - upBefore; n != 0 {
		b.Fatalf("%d upstream calls", n)
	}
	hits := servertest.MetricValue(b, env.Registry, "streamgate_archive_reads_total", map[string]string{"result": "hit"}) - hits0
	if want := float64(len(reports) + (len(pageTargets)+len(pagesAgain))*limit); hits != want {
		b.Fatalf("%v reports read from the archive, want %v: the first round of each was not the archive's", hits, want)
	}
}
