package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/don"
	"streamgate/server"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// The gateway's answer paths, called in-process through
// Gateway.Handler(network).ServeHTTP with an httptest.ResponseRecorder: no
// sockets, so what is measured is the gateway's own work, middleware
// (request ID, metrics, access log check) included.
//
// The requests are signed once, before the loop, and sent again and
// again. For that the benchmark gateway runs with replay protection off
// and a max skew of one hour; everything else is the servertest
// configuration (the demo team, unlimited). Latest reports live for an
// hour and are not taken from the upstream's stream, so that every latest
// request is a cache hit.

// benchGateway starts a gateway for the benchmarks and returns it with the
// mainnet handler.
func benchGateway(b *testing.B) (*servertest.Env, http.Handler) {
	b.Helper()
	env := servertest.Start(b, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		c.Auth.ReplayProtection = false
		c.Auth.MaxSkew = time.Hour
		c.Cache.LatestTTL = time.Hour
		c.Realtime.LatestFromStream = false // latest from the cache, not the stream
	}})
	return env, env.Gateway.Handler("mainnet")
}

// benchRequest is a GET of target signed with the demo key.
func benchRequest(target string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	auth.Sign(r, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
	return r
}

// benchServe serves a fresh signed request for target until it answers
// want with X-Cache HIT (the cache's writes are asynchronous).
func benchServe(b *testing.B, env *servertest.Env, h http.Handler, target string, want int) {
	b.Helper()
	for range 50 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, benchRequest(target))
		if rec.Code == want && rec.Header().Get("X-Cache") == "HIT" {
			return
		}
		env.Cache.Wait()
	}
	b.Fatalf("%s never answered %d from the cache", target, want)
}

// benchFeeds returns n public live mainnet streams with a full history.
func benchFeeds(b testing.TB, env *servertest.Env, n int) []string {
	b.Helper()
	hidden := map[string]bool{}
	for _, id := range env.Sim.Hidden(upstreamsim.Mainnet) {
		hidden[id] = true
	}
	now := time.Now().Unix()
	var out []string
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		first, last, ok := env.Sim.Window(upstreamsim.Mainnet, s.FeedID)
		if ok && !hidden[s.FeedID] && s.Status == "live" && first < now-3600 && last > now-60 && len(out) < n {
			out = append(out, s.FeedID)
		}
	}
	if len(out) < n {
		b.Fatalf("only %d streams fit", len(out))
	}
	return out
}

// benchRun serves r to h b.N times, serially or from parallel goroutines,
// and fails on any other status than want.
func benchRun(b *testing.B, h http.Handler, target string, want int, parallel bool) {
	b.Helper()
	b.ReportAllocs()
	if !parallel {
		r := benchRequest(target)
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != want {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
		return
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		r := benchRequest(target)
		for pb.Next() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if rec.Code != want {
				b.Errorf("status %d: %s", rec.Code, rec.Body)
				return
			}
		}
	})
}

// BenchmarkGatewayLatestHit is the hottest path: a signed latest report
// answered from the cache.
func BenchmarkGatewayLatestHit(b *testing.B) {
	env, h := benchGateway(b)
	target := "/api/v1/reports/latest?feedID=" + benchFeeds(b, env, 1)[0]
	benchServe(b, env, h, target, http.StatusOK)
	b.Run("serial", func(b *testing.B) { benchRun(b, h, target, http.StatusOK, false) })
	b.Run("parallel", func(b *testing.B) { benchRun(b, h, target, http.StatusOK, true) })
}

// BenchmarkGatewayReportHit is a report at a timestamp, cached.
func BenchmarkGatewayReportHit(b *testing.B) {
	env, h := benchGateway(b)
	ts := time.Now().Add(-time.Hour).Unix()
	target := "/api/v1/reports?feedID=" + benchFeeds(b, env, 1)[0] + "&timestamp=" + strconv.FormatInt(ts, 10)
	benchServe(b, env, h, target, http.StatusOK)
	benchRun(b, h, target, http.StatusOK, false)
}

// BenchmarkGatewayBulkHit is a bulk request whose streams are all cached:
// per-stream lookups, unwrapping each cached report and merging them.
func BenchmarkGatewayBulkHit(b *testing.B) {
	env, h := benchGateway(b)
	ts := time.Now().Add(-time.Hour).Unix()
	for _, n := range []int{1, 20, 50} {
		target := "/api/v1/reports/bulk?feedIDs=" + strings.Join(benchFeeds(b, env, n), "%2C") + "&timestamp=" + strconv.FormatInt(ts, 10)
		benchServe(b, env, h, target, http.StatusOK)
		b.Run("streams="+strconv.Itoa(n), func(b *testing.B) { benchRun(b, h, target, http.StatusOK, false) })
	}
}

// BenchmarkGatewayDiscovery is a filtered catalog request answered from the
// cached view: parse the filter, match every stream, write the JSON.
func BenchmarkGatewayDiscovery(b *testing.B) {
	env, h := benchGateway(b)
	for _, q := range []string{"", "?asset_class=Crypto&quote_asset=USD&status=live"} {
		target := "/api/v1/discovery" + q
		benchServe(b, env, h, target, http.StatusOK)
		name := "all"
		if q != "" {
			name = "filtered"
		}
		b.Run(name, func(b *testing.B) { benchRun(b, h, target, http.StatusOK, false) })
	}
}

// BenchmarkGatewayBadSignature is a request refused by authentication, the
// path a flood of bad requests takes.
func BenchmarkGatewayBadSignature(b *testing.B) {
	env, h := benchGateway(b)
	target := "/api/v1/reports/latest?feedID=" + benchFeeds(b, env, 1)[0]
	r := httptest.NewRequest(http.MethodGet, target, nil)
	auth.Sign(r, config.DemoKeyID, []byte("not-the-secret-0123456789"), time.Now())
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusUnauthorized {
			b.Fatalf("status %d", rec.Code)
		}
	}
}

// hitWriter is a ResponseWriter that keeps the status and drops the body,
// its header map cleared for each request: a harness that allocates
// nothing itself, so that the allocations reported are the gateway's.
type hitWriter struct {
	h    http.Header
	code int
	n    int
}

func (w *hitWriter) Header() http.Header { return w.h }
func (w *hitWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *hitWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	w.n += len(b)
	return len(b), nil
}

func (w *hitWriter) reset() { clear(w.h); w.code, w.n = 0, 0 }

// BenchmarkGatewayLatestHitAllOn is the latest hit with every feature of
// the request path on, as shipped: replay protection (every request signed
// afresh, its signature recorded), the team's rate and daily quota (never
// refusing) with their RateLimit headers, metrics, and the access log in
// the default JSON format at info (to io.Discard). Requests are signed in
// batches with the timer stopped; the writer allocates nothing of its own.
func BenchmarkGatewayLatestHitAllOn(b *testing.B) {
	log := server.NewLogger(config.Log{Level: config.LogLevelInfo, Format: config.LogFormatJSON}, zapcore.AddSync(io.Discard))
	env := servertest.Start(b, servertest.Options{Logger: log, Config: func(c *config.Config) {
		c.Auth.ReplayProtection = true
		c.Auth.MaxSkew = time.Hour
		c.Cache.LatestTTL = time.Hour
		c.Realtime.LatestFromStream = false // latest from the cache, not the stream
		demo := c.Team(config.DemoTeam)
		demo.Rate, demo.DailyQuota = config.Rate{RPS: 1_000_000, Burst: 1_000_000}, 1_000_000_000_000
	}})
	h := env.Gateway.Handler("mainnet")
	target := "/api/v1/reports/latest?feedID=" + benchFeeds(b, env, 1)[0]
	benchServe(b, env, h, target, http.StatusOK)
	base := time.Now().Add(-50 * time.Minute)
	batch := make([]*http.Request, 4096)
	signed := 0
	sign := func() {
		for i := range batch {
			r := httptest.NewRequest(http.MethodGet, target, nil)
			auth.Sign(r, config.DemoKeyID, []byte(config.DemoKeySecret), base.Add(time.Duration(signed)*time.Millisecond))
			signed++
			batch[i] = r
		}
	}
	w := &hitWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%len(batch) == 0 {
			b.StopTimer()
			sign()
			b.StartTimer()
		}
		w.reset()
		h.ServeHTTP(w, batch[i%len(batch)])
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
}

// BenchmarkGatewayHitCost compares a bulk answered from the cache with a
// single-stream hit, both through a writer that drops the body (hitWriter):
// what the gateway spends, without a recorder copying 33 KB of answer.
// Replay protection is off (benchGateway), so each request is signed once.
func BenchmarkGatewayHitCost(b *testing.B) {
	env, h := benchGateway(b)
	ts := time.Now().Add(-time.Hour).Unix()
	feeds := benchFeeds(b, env, 20)
	targets := []struct{ name, target string }{
		{"latest", "/api/v1/reports/latest?feedID=" + feeds[0]},
		{"report", "/api/v1/reports?feedID=" + feeds[0] + "&timestamp=" + strconv.FormatInt(ts, 10)},
		{"bulk=1", "/api/v1/reports/bulk?feedIDs=" + feeds[0] + "&timestamp=" + strconv.FormatInt(ts, 10)},
		{"bulk=20", "/api/v1/reports/bulk?feedIDs=" + strings.Join(feeds, "%2C") + "&timestamp=" + strconv.FormatInt(ts, 10)},
	}
	for _, tc := range targets {
		benchServe(b, env, h, tc.target, http.StatusOK)
		b.Run(tc.name, func(b *testing.B) {
			r := benchRequest(tc.target)
			w := &hitWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				w.reset()
				h.ServeHTTP(w, r)
				if w.code != http.StatusOK {
					b.Fatalf("status %d", w.code)
				}
			}
		})
	}
}

// BenchmarkGatewayPageDecodedHit: a cached page of 100 reports, raw and
// as the decoded view (Accept), from the same entry: what a decoded hit
// costs beside a raw one.
func BenchmarkGatewayPageDecodedHit(b *testing.B) {
	env, h := benchGateway(b)
	start := time.Now().Add(-2 * time.Hour).Unix()
	target := "/api/v1/reports/page?feedID=" + benchFeeds(b, env, 1)[0] + "&startTimestamp=" + strconv.FormatInt(start, 10) + "&limit=100"
	benchServe(b, env, h, target, http.StatusOK)
	for _, accept := range []string{"", don.DecodedMediaType} {
		name := "raw"
		if accept != "" {
			name = "decoded"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			r := benchRequest(target)
			r.Header.Set("Accept", accept)
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				if rec.Code != http.StatusOK || rec.Header().Get("X-Cache") != "HIT" {
					b.Fatalf("status %d, X-Cache %q", rec.Code, rec.Header().Get("X-Cache"))
				}
			}
		})
	}
}
