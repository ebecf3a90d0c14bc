package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/internal/testing/redisproc"
	"streamgate/internal/testing/redistest"
	"streamgate/internal/testing/testport"
	"streamgate/upstreamsim"
)

// A short load against a server that verifies every signature with replay
// protection on: every request is counted once, by status or as an error,
// and no signature is ever used twice.
func TestLoadCountsAnswersAndSignsAfresh(t *testing.T) {
	keys := []key{{ID: "k1", Secret: []byte("secret-one-0123456789")}, {ID: "k2", Secret: []byte("secret-two-0123456789")}}
	ks, err := auth.NewKeyStore([]auth.Team{{Name: "t", All: true, Keys: []auth.Key{
		{ID: "k1", Secrets: []string{"secret-one-0123456789"}}, {ID: "k2", Secrets: []string{"secret-two-0123456789"}},
	}}})
	require.NoError(t, err)
	v := auth.NewVerifier(auth.VerifierConfig{ReplayProtection: true})
	var served, refused, failed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := v.Verify(ks, r); err != nil {
			refused.Add(1)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if served.Add(1)%3 == 0 {
			failed.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Cache", "HIT")
		w.Write([]byte(`{"report":{}}`))
	}))
	defer srv.Close()

	l := &load{
		Client: newClient(8), Bases: []string{srv.URL}, Keys: keys, Concurrency: 8,
		Duration: 500 * time.Millisecond, MaxRequests: 1000,
		// Few targets, so that many requests for one target fall in one
		// millisecond and only distinct timestamps keep them apart.
		Next: func(i int64, _ int, _ *rand.Rand) call { return call{Target: []string{"/a", "/b?x=1"}[i%2]} },
	}
	r := l.run(context.Background())
	require.Positive(t, r.Requests)
	assert.Zero(t, refused.Load(), "a signature was refused: reused or wrong")
	assert.Zero(t, r.Errors)
	assert.Equal(t, served.Load()+refused.Load(), r.Requests)
	assert.Equal(t, failed.Load(), r.Status[http.StatusServiceUnavailable])
	assert.Equal(t, r.Requests-failed.Load(), r.Status[http.StatusOK])
	assert.Equal(t, r.Status[http.StatusOK], r.XCache["HIT"])
	assert.Equal(t, uint64(r.Requests), r.Hist.n)
	assert.LessOrEqual(t, r.Requests, int64(1000))
}

// Requests that get no answer are errors, by kind, and nothing else.
func TestLoadCountsTransportErrors(t *testing.T) {
	addr := testport.Refusing(t).Addr() // refuses, for the whole test
	l := &load{
		Client: newClient(2), Bases: []string{"http://" + addr}, Concurrency: 2, Duration: time.Second, MaxRequests: 20,
		Next: func(int64, int, *rand.Rand) call { return call{Target: "/"} },
	}
	r := l.run(context.Background())
	assert.Zero(t, r.Requests)
	assert.Equal(t, int64(20), r.Errors)
	assert.Equal(t, int64(20), r.ErrKinds["refused"])
	assert.Contains(t, r.ErrFirst["refused"], "refused")
	assert.Empty(t, r.Status)
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 100000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := q * 100000 * float64(time.Microsecond)
		got := float64(h.quantile(q))
		assert.InEpsilon(t, want, got, 1.0/64, "q=%v", q)
	}
	assert.Equal(t, 100*time.Millisecond, h.quantile(1))
	assert.Equal(t, time.Microsecond, h.min)

	var a, b histogram
	a.record(time.Millisecond)
	b.record(3 * time.Millisecond)
	a.merge(&b)
	assert.Equal(t, uint64(2), a.n)
	assert.Equal(t, 2*time.Millisecond, a.mean())
	for v := uint64(0); v < 1<<62; v += v/50 + 1 {
		i := histIndex(v)
		if i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d, out of range", v, i)
		}
		if mid := histValue(i); float64(max(mid, v)-min(mid, v)) > float64(v)/64+1 {
			t.Fatalf("bucket of %d has middle %d: more than 1/64 off", v, mid)
		}
	}
}

func TestParseMix(t *testing.T) {
	m, err := parseMix("latest=8, reports=1,bulk=1,page=0")
	require.NoError(t, err)
	assert.Equal(t, "latest=8,reports=1,bulk=1", m.String())
	assert.Equal(t, "latest", m.pick(7))
	assert.Equal(t, "reports", m.pick(8))
	assert.Equal(t, "bulk", m.pick(9))
	for _, bad := range []string{"", "latest", "latest=x", "nope=1", "latest=0", "latest=-1"} {
		_, err := parseMix(bad)
		assert.Error(t, err, bad)
	}
}

// The self-contained scenarios run end to end on a tiny budget.
func TestScenariosSmoke(t *testing.T) {
	for _, args := range [][]string{
		{"-scenario", "hit", "-rounds", "1", "-pin=false", "-hit-bulk", "4", "-tls"},
		{"-scenario", "bulk-reduction", "-n", "20", "-bulk", "4", "-bulk-cached", "3"},
		{"-scenario", "catalog-reduction", "-teams", "3"},
	} {
		t.Run(args[1], func(t *testing.T) {
			var out, errOut bytes.Buffer
			base := []string{"-c", "4", "-d", "200ms", "-warmup", "0", "-streams", "4", "-log", "off"}
			err := run(context.Background(), append(base, args...), &out, &errOut)
			require.NoError(t, err, errOut.String())
			assert.Contains(t, out.String(), "statuses")
			assert.NotContains(t, out.String(), "gateway errors")
			if args[1] == "hit" {
				assert.Contains(t, out.String(), "gw-tls    / gateway", "the TLS side measured beside the plain one")
			}
			for _, line := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(line, "gateway ") || strings.HasPrefix(line, "gw-tls ") {
					assert.Contains(t, line, " 0  200:", "every request answered 200: %s", line)
				}
			}
		})
	}
}

// The ws scenario, tiny, in two rounds: every expected frame counted once,
// no duplicate, at most two upstream connections, each side measured once
// a round, the order turning; the figures' lines are there and the ratios
// of each round (their values are timings and not checked).
func TestScenarioWSSmoke(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "ws", "-c", "20", "-d", "2s", "-rounds", "2", "-log", "off"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	o := out.String()
	t.Log(o)
	assert.Regexp(t, `upstream WebSocket connections held: at most [12] at once during the window`, o)
	assert.Regexp(t, `frames delivered (\d+) of (\d+) expected`, o)
	ms := regexp.MustCompile(`frames delivered (\d+) of (\d+) expected \(1\.00\); duplicates 0; frames of streams not asked 0; clients closed early 0`).FindAllStringSubmatch(o, -1)
	require.Len(t, ms, 4, "every expected frame, once, from the gateway and from the baseline, in each round: %s", o)
	for _, m := range ms {
		assert.Equal(t, m[1], m[2])
		assert.Equal(t, "400", m[2], "20 clients × 10 streams × 2 s")
	}
	assert.Regexp(t, `(?s)streamgate, round 1 of 2:\n.*bare fan-out server \(baseline\), round 1 of 2:\n.*`+
		`bare fan-out server \(baseline\), round 2 of 2:\n.*streamgate, round 2 of 2:\n`, o, "both sides in each round, the order turning")
	assert.Regexp(t, `CPU per delivered frame  \d+\.\d{3} \[\d+\.\d{3}, \d+\.\d{3}\]  \(\d+\.\d{3} \d+\.\d{3}\)`, o, "a ratio for each round")
	for _, line := range []string{"added delay", "CPU per delivered frame", "memory per client: heap in use", "goroutines"} {
		assert.Contains(t, o, line)
	}
}

// The ws-latest scenario, tiny: every answer from the stream, no upstream
// latest call.
func TestScenarioWSLatestSmoke(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "ws-latest", "-c", "4", "-d", "500ms", "-streams", "10", "-log", "off"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	o := out.String()
	t.Log(o)
	assert.Contains(t, o, "upstream REST latest calls 0 (goal 0)")
	assert.Regexp(t, `errors 0, statuses 200:\d+, X-Cache STREAM:\d+;`, o)
	assert.Contains(t, o, "answer age now − observationsTimestamp")
}

// The freshness scenario, tiny, with the simulator's 10 rps limit on: both
// behaviours reported with every figure, no 429 from the upstream and none
// passed on to a client (counts, not timings).
func TestScenarioFreshnessSmoke(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "freshness", "-c", "4", "-streams", "6", "-d", "1s", "-warmup", "500ms", "-log", "off"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	o := out.String()
	t.Log(o)
	for _, label := range []string{"swr", "before"} {
		m := regexp.MustCompile(label + `, simulator counting bucket, budget 10/s, 4 clients, 6 streams: asked (\d+) \(\d+/s; offered 40/s\), answered (\d+) \(\d+/s\), errors (\d+), statuses (.*); last answer`).FindStringSubmatch(o)
		require.NotNil(t, m, "the %s line: %s", label, o)
		assert.NotEqual(t, "0", m[1], "%s: requests were asked", label)
		assert.Equal(t, m[1], m[2], "%s: every request answered", label)
		assert.Equal(t, "0", m[3], label)
		assert.NotContains(t, m[4], "429:", label)
		assert.Regexp(t, label+` non-200 \d+ of \d+ \([\d.]+%; goal ≤ 0\.1%\); 429 to clients 0; X-Cache `, o)
		assert.Regexp(t, label+` latency p50 \S+, p99 \S+, max \S+`, o)
		assert.Regexp(t, label+` age now − observationsTimestamp: p50 \S+, p99 \S+, max \S+; minus the stream's publication delay`, o)
		assert.Regexp(t, label+` upstream during the window: 429 0 \(goal 0\); latest calls mainnet \d+, testnet 0; bulk calls mainnet \d+, testnet 0 \(\d+ stream IDs\); other calls \d+`, o)
		assert.Regexp(t, label+` upstream during the warm-up: 429 \d+`, o)
		assert.Regexp(t, `(?m)^`+label+` +bucket +10 +4 +6 +\d+ +\d+ +[\d.]+% `, o, "%s: a row of the summary", label)
	}
	assert.Contains(t, o, "swr    latest_max_stale 3s, latest_max_wait 1s, latest_bulk_refresh true")
	assert.Contains(t, o, "before latest_max_stale 0s, latest_max_wait 30s, latest_bulk_refresh false")
}

// The replicas scenario, tiny, against a real redis-server: a row for 1, 2
// and 3 replicas, the later ones answering from each other's fills, no
// Redis call failed but by a timeout (which a starved machine can cause)
// and no shared tier lookup failed without one, no lease wait ended by its
// bound, and the hit latency part.
func TestScenarioReplicasSmoke(t *testing.T) {
	srv := redistest.New(t)
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "replicas", "-redis", srv.URL(), "-c", "6", "-d", "1s", "-log", "off"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	o := out.String()
	t.Log(o)
	failed := redisFailures(t, o, "single")
	for n := 1; n <= 3; n++ {
		m := regexp.MustCompile(`(?m)^` + strconv.Itoa(n) + ` +(\d+) +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +[\d.]+ +(\d+) +(\d+) +(\d+)$`).FindStringSubmatch(o)
		require.NotNil(t, m, "the row of %d replicas: %s", n, o)
		assert.NotEqual(t, "0", m[1], "%d replicas: requests answered", n)
		if n > 1 {
			assert.NotEqual(t, "0", m[2], "%d replicas: fills answered from another's", n)
		}
		errs, err := strconv.ParseFloat(m[4], 64)
		require.NoError(t, err)
		assert.LessOrEqual(t, errs, failed[n-1], "%d replicas: a shared tier lookup fails only with a failed Redis call", n)
	}
	assert.Contains(t, o, "lease waits ended by the wait bound: [0 0 0]")
	assert.Regexp(t, `added by the shared tier \(Redis vs memory\): p50 \S+, p90 \S+`, o)
	assert.Regexp(t, `shared tier lookup alone \(1\.6 KB entry, no HTTP\): p50 \S+, p90 \S+, p99 \S+`, o)
	assert.NotContains(t, o, "== Redis", "without -redis-mode the output is as before")
	assert.NotContains(t, o, "Redis per request", "without -redis-mode the output is as before")
}

// The replicas scenario, tiny, on each Redis mode, each started by the
// scenario: the table of each mode with no Redis call failed but by a timeout, then a row of
// Redis cost for each mode and replica count, with round trips and
// commands counted and the masters' CPU read, and the added p99 of
// sentinel and cluster against single.
func TestScenarioReplicasRedisModes(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-sentinel", "redis-cli"} {
		if _, err := redisproc.LookPath(bin); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%v, and CI=true requires the Redis tests to run", err)
			}
			t.Skip(err)
		}
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "replicas", "-redis-mode", "all", "-c", "4", "-d", "1s", "-n", "150", "-log", "off"}, &out, &errOut)
	require.NoError(t, err, errOut.String())
	o := out.String()
	t.Log(o)
	parts := strings.Split(o, "\n== Redis ")
	require.Len(t, parts, 4, "a part for each mode: %s", o)
	for i, mode := range redisModes {
		part := parts[i+1]
		require.True(t, strings.HasPrefix(part, mode+": "), "part %d is mode %s: %s", i, mode, part)
		failed := redisFailures(t, part, mode)
		for n := 1; n <= 3; n++ {
			m := regexp.MustCompile(`(?m)^` + strconv.Itoa(n) + ` +(\d+) +\d+ +\d+ +\d+ +\d+ +\d+ +\d+ +[\d.]+ +\d+ +\d+ +(\d+)$`).FindStringSubmatch(part)
			require.NotNil(t, m, "%s: the row of %d replicas: %s", mode, n, part)
			assert.NotEqual(t, "0", m[1], "%s, %d replicas: requests answered", mode, n)
			errs, err := strconv.ParseFloat(m[2], 64)
			require.NoError(t, err)
			assert.LessOrEqual(t, errs, failed[n-1], "%s, %d replicas: a shared tier lookup fails only with a failed Redis call", mode, n)
		}
		assert.Contains(t, part, "from Redis (second replica)", mode)
	}
	row := regexp.MustCompile(`(?m)^(single|sentinel|cluster) +([123]) +(\d+) +\d+ +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+) +\S+ +\S+ +(\S+)$`)
	rows := row.FindAllStringSubmatch(o, -1)
	require.Len(t, rows, 9, "a Redis cost row for each mode and replica count: %s", o)
	for _, m := range rows {
		num := func(i int) float64 {
			v, err := strconv.ParseFloat(m[i], 64)
			require.NoError(t, err)
			return v
		}
		assert.Greater(t, num(4), 0.0, "%s: round trips per request", m[0])
		assert.Greater(t, num(5), 0.0, "%s: the ratelimit client's round trips (the admission)", m[0])
		assert.GreaterOrEqual(t, num(7), num(4), "%s: commands at least the round trips", m[0])
		assert.Greater(t, num(8), 0.0, "%s: the masters' CPU", m[0])
		if m[1] == redisSingle {
			assert.Equal(t, "-", m[9], m[0])
		} else {
			assert.Regexp(t, `^[+-]\S+$`, m[9], "%s: added p99 against single", m[0])
		}
	}
	assert.Regexp(t, `(?m)^sentinel +\S+ +\S+ +\S+ +[+-]\S+ +[+-]\S+$`, o, "the hit latency's added p99 on sentinel")
	assert.Regexp(t, `(?m)^cluster +\S+ +\S+ +\S+ +[+-]\S+ +[+-]\S+$`, o, "the hit latency's added p99 on cluster")
}

// redisFailures reads the scenario's line of failed Redis calls by kind
// (one value for 1, 2 and 3 replicas each) and asserts the only failures
// are those a starved machine can cause, timeouts and the breaker they
// open: none refused, redirected, read-only or otherwise wrong (an error
// reply is Redis answering, and a lookup it failed is held below). It returns
// the failures by replica count, to bound the shared tier's lookup errors:
// an errored lookup is a failed call.
func redisFailures(t *testing.T, out, label string) [3]float64 {
	t.Helper()
	m := regexp.MustCompile(`Redis calls failed by 1, 2, 3 replicas: timed out \[(\S+) (\S+) (\S+)\], refused by an open breaker \[(\S+) (\S+) (\S+)\], error replies \[\S+ \S+ \S+\], other \[(\S+) (\S+) (\S+)\]`).FindStringSubmatch(out)
	require.NotNil(t, m, "%s: the line of failed Redis calls: %s", label, out)
	var failed [3]float64
	for n := 0; n < 3; n++ {
		num := func(s string) float64 {
			v, err := strconv.ParseFloat(s, 64)
			require.NoError(t, err, label)
			return v
		}
		assert.Equal(t, "0", m[7+n], "%s, %d replicas: no Redis call failed but by a timeout", label, n+1)
		failed[n] = num(m[1+n]) + num(m[4+n])
	}
	return failed
}

func TestParseRedisModes(t *testing.T) {
	for in, want := range map[string][]string{
		"single":           {"single"},
		"cluster,sentinel": {"cluster", "sentinel"},
		"all":              {"single", "sentinel", "cluster"},
	} {
		got, err := parseRedisModes(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "replica", "single,single", "single,"} {
		_, err := parseRedisModes(bad)
		assert.Error(t, err, bad)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"-scenario", "replicas", "-redis", "redis://127.0.0.1:1/0", "-redis-mode", "cluster"}, &out, &errOut)
	assert.ErrorContains(t, err, "-redis is a single node")
}

func TestParseRateModes(t *testing.T) {
	all := []upstreamsim.RateMode{upstreamsim.RateBucket, upstreamsim.RateCalendar, upstreamsim.RateSliding}
	for _, tc := range []struct {
		in   string
		want []upstreamsim.RateMode
	}{
		{"bucket", all[:1]},
		{"calendar,sliding", all[1:]},
		{"all", all},
	} {
		got, err := parseRateModes(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "leaky", "bucket,leaky"} {
		_, err := parseRateModes(bad)
		assert.Error(t, err, bad)
	}
}
