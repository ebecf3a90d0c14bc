package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
)

// request is one request of a load: its URL, and whether it goes unsigned.
type request struct {
	url  string
	anon bool
}

// load is a set of clients calling a gateway, each until it is stopped or
// has made its share of requests. It classifies every outcome: a complete
// 200 with a JSON body is good; once stopping is set (just before SIGTERM),
// a refused connection ends a client and is expected; anything else is a
// failure, in particular a request that was sent and then lost.
type load struct {
	stopping  atomic.Bool
	completed atomic.Int64
	refused   atomic.Int64
	stop      chan struct{}
	wg        sync.WaitGroup

	mu       sync.Mutex
	failures []string
	nfail    int
}

// startLoad starts workers clients sharing one keep-alive transport; worker
// w makes at most perWorker(w) requests, next(w, i) being its i-th.
func startLoad(t testing.TB, s *signer, workers int, perWorker func(w int) int, next func(w, i int) request) *load {
	l := &load{stop: make(chan struct{})}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = workers
	hc := &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	for w := range workers {
		l.wg.Go(func() {
			for i := range perWorker(w) {
				select {
				case <-l.stop:
					return
				default:
				}
				rq := next(w, i)
				signer := s
				if rq.anon {
					signer = nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, body, err := fetch(ctx, hc, signer, rq.url)
				cancel()
				if err != nil && l.stopping.Load() && isDialError(err) {
					l.refused.Add(1)
					return
				}
				if err := validAnswer(resp, body, err); err != nil {
					l.fail(rq.url, err)
					if l.stopping.Load() {
						return
					}
					continue
				}
				l.completed.Add(1)
			}
		})
	}
	t.Cleanup(l.end)
	return l
}

func (l *load) fail(url string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.nfail++
	if len(l.failures) < 20 {
		l.failures = append(l.failures, fmt.Sprintf("%s: %v", url, err))
	}
}

// waitCompleted waits until n requests have completed, so that the load is
// under way.
func (l *load) waitCompleted(t testing.TB, n int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.completed.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests completed; failures: %v", l.completed.Load(), l.report())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// end stops the clients and waits for them.
func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// wait waits for the clients to end by themselves.
func (l *load) wait() { l.wg.Wait() }

func (l *load) report() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nfail == 0 {
		return "none"
	}
	return fmt.Sprintf("%d failed requests, first ones:\n  %s", l.nfail, strings.Join(l.failures, "\n  "))
}

func (l *load) failed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.nfail
}

// mixedLoad is the requests of a busy gateway: workers below slow ask for
// reports no cache holds (they wait for the upstream budget, so some are
// always in flight); the others ask for catalogs, latest reports, cached
// reports and pages.
func mixedLoad(base string, feeds []string, slow int) func(w, i int) request {
	ts := pastTS()
	fixed := time.Now().Add(-2 * time.Hour).Unix()
	return func(w, i int) request {
		feed := feeds[(w+i)%len(feeds)]
		if w < slow {
			return request{url: reportURL(base, feed, ts())}
		}
		switch i % 5 {
		case 0:
			return request{url: base + "/api/v1/discovery", anon: true}
		case 1:
			return request{url: base + "/api/v1/reports/latest?feedID=" + feed}
		case 2:
			return request{url: base + "/api/v1/feeds"}
		case 3:
			return request{url: reportURL(base, feed, fixed)}
		default:
			return request{url: fmt.Sprintf("%s/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=5", base, feed, fixed)}
		}
	}
}

// TestSIGTERMUnderLoadLosesNoRequest sends SIGTERM while clients are busy:
// every request the gateway accepted gets a complete answer, later ones are
// refused at connect, and the process exits 0.
func TestSIGTERMUnderLoadLosesNoRequest(t *testing.T) {
	p := start(t, testConfig{}.String(), []string{"mainnet", "testnet"})
	base := p.net["mainnet"]
	feeds := feedIDs(t, base, 3)
	const workers, slow = 12, 4
	l := startLoad(t, newSigner(config.DemoKeyID, config.DemoKeySecret), workers,
		func(w int) int {
			if w < slow {
				return 60
			}
			return 1500
		},
		mixedLoad(base, feeds, slow))
	l.waitCompleted(t, 1000)

	l.stopping.Store(true)
	atSignal := l.completed.Load()
	p.signal(syscall.SIGTERM)
	code := p.wait(15*time.Second + 15*time.Second)
	l.wait()

	assert.Equal(t, 0, code, "exit status after SIGTERM")
	assert.Zero(t, l.failed(), l.report())
	t.Logf("%d requests answered, %d of them after SIGTERM; %d refused at connect after SIGTERM",
		l.completed.Load(), l.completed.Load()-atSignal, l.refused.Load())
	p.waitLog(time.Second, func(l logLine) bool { return l.str("msg") == "stopped" })
	assertNoLog(t, p, "drain incomplete")
}

// TestSIGTERMFinishesRequestsInFlight holds requests in the gateway (they
// wait for a slow upstream budget), sends SIGTERM, and checks that each of
// them is answered in full before the process exits 0, and that /readyz no
// longer says ready meanwhile.
func TestSIGTERMFinishesRequestsInFlight(t *testing.T) {
	p := start(t, testConfig{budget: "{rps: 2, burst: 1}"}.String(), []string{"mainnet", "testnet"})
	base := p.net["mainnet"]
	feed := feedIDs(t, base, 1)[0]
	demo := newSigner(config.DemoKeyID, config.DemoKeySecret)
	ts := pastTS()

	authenticated := func() uint64 {
		return scrape(t, p)["streamgate_client_clock_skew_seconds"].GetMetric()[0].GetHistogram().GetSampleCount()
	}
	before := authenticated()
	const n = 5
	results := make(chan error, n)
	for range n {
		url := reportURL(base, feed, ts())
		go func() {
			resp, body, err := fetch(context.Background(), &http.Client{Timeout: time.Minute}, demo, url)
			if err == nil && !strings.Contains(string(body), `"fullReport"`) {
				err = fmt.Errorf("not a report: %s", body)
			}
			results <- validAnswer(resp, body, err)
		}()
	}
	// Once authenticated, every request is in the gateway's hands: at most
	// one or two have had their upstream call, the others wait for it.
	deadline := time.Now().Add(20 * time.Second)
	for authenticated() < before+n {
		require.True(t, time.Now().Before(deadline), "the requests never reached the gateway")
		time.Sleep(10 * time.Millisecond)
	}

	mark := p.logMark()
	p.signal(syscall.SIGTERM)
	p.waitLogFrom(mark, 10*time.Second, func(l logLine) bool { return l.str("msg") == "draining" })
	if resp, err := http.Get(p.admin + "/readyz"); err == nil {
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "/readyz while draining")
	} else {
		assert.True(t, isDialError(err), "/readyz while draining: %v", err)
	}
	for range n {
		assert.NoError(t, <-results, "a request in flight at SIGTERM")
	}
	assert.Equal(t, 0, p.wait(30*time.Second), "exit status after SIGTERM")
	assertNoLog(t, p, "drain incomplete")
}

// TestSIGHUPUnderLoad reloads the configuration while clients are busy: a
// new key and a changed team rate take effect, no request fails, an open
// connection stays open, and a configuration with problems is refused with
// the one in force kept.
func TestSIGHUPUnderLoad(t *testing.T) {
	cfg := testConfig{}
	p := start(t, cfg.String(), []string{"mainnet", "testnet"})
	base := p.net["mainnet"]
	feeds := feedIDs(t, base, 3)
	demo := newSigner(config.DemoKeyID, config.DemoKeySecret)
	tiny := newSigner(tinyKeyID, tinyKeySecret)
	late := newSigner(lateKeyID, lateKeySecret)

	code, body := mustGet(t, late, base+"/api/v1/feeds")
	require.Equal(t, http.StatusUnauthorized, code, "a key of no configured team: %s", body)
	code, _ = mustGet(t, tiny, base+"/api/v1/feeds")
	require.Equal(t, http.StatusOK, code)
	code, _ = mustGet(t, tiny, base+"/api/v1/feeds")
	require.Equal(t, http.StatusTooManyRequests, code, "the tiny team's second request")

	kept := newConnTracker()
	kept.get(t, demo, base+"/api/v1/feeds")

	l := startLoad(t, demo, 8, func(int) int { return 2000 }, mixedLoad(base, feeds, 2))
	l.waitCompleted(t, 500)

	// A new team, the tiny team without a rate, and a setting that only a
	// restart changes.
	cfg.extra, cfg.shutdown = lateTeam, "20s"
	cfg.tinyRate = "daily_quota: 0" // no rate line: no limit
	mark := p.logMark()
	p.writeConfig(cfg.String())
	p.signal(syscall.SIGHUP)
	p.waitLogFrom(mark, 10*time.Second, func(l logLine) bool { return l.str("msg") == "configuration reloaded" })
	restart, _ := p.waitLogFrom(mark, time.Second, func(l logLine) bool { return strings.Contains(l.str("msg"), "only change with a restart") })
	assert.Equal(t, []any{"server.shutdown_timeout"}, restart["settings"])

	code, body = mustGet(t, late, base+"/api/v1/feeds")
	assert.Equal(t, http.StatusOK, code, "the new key after the reload: %s", body)
	for range 3 {
		code, _ = mustGet(t, tiny, base+"/api/v1/feeds")
		assert.Equal(t, http.StatusOK, code, "the tiny team, now without a rate limit")
	}
	kept.get(t, demo, base+"/api/v1/feeds")
	kept.assertOneConnection(t)

	mark = p.logMark()
	p.writeConfig(invalidConfig)
	p.signal(syscall.SIGHUP)
	refused, _ := p.waitLogFrom(mark, 10*time.Second, func(l logLine) bool {
		return strings.HasPrefix(l.str("msg"), "reload refused")
	})
	assert.Contains(t, refused.str("error"), "line 2", "the refusal lists the problems")
	assert.Contains(t, refused.str("error"), "nowhere", "the refusal lists the problems")
	assert.NotContains(t, refused.str("error"), "tooShort42", "a secret in a log line")
	code, _ = mustGet(t, late, base+"/api/v1/feeds")
	assert.Equal(t, http.StatusOK, code, "the configuration in force stays after a refused reload")
	code, _ = mustGet(t, tiny, base+"/api/v1/feeds")
	assert.Equal(t, http.StatusOK, code, "the configuration in force stays after a refused reload")

	l.end()
	require.False(t, p.done(), "streamgate exited")
	assert.Zero(t, l.failed(), l.report())
	t.Logf("%d requests answered during the reloads", l.completed.Load())

	p.signal(syscall.SIGTERM)
	assert.Equal(t, 0, p.wait(30*time.Second))
}

// TestWatchReloadsAChangedFile runs with -watch: changing the file reloads
// it without a signal, and a file with problems is refused.
func TestWatchReloadsAChangedFile(t *testing.T) {
	cfg := testConfig{}
	p := start(t, cfg.String(), []string{"mainnet", "testnet"}, "-watch")
	p.waitLog(5*time.Second, func(l logLine) bool { return l.str("msg") == "watching the configuration file" })
	base := p.net["mainnet"]
	late := newSigner(lateKeyID, lateKeySecret)
	code, _ := mustGet(t, late, base+"/api/v1/feeds")
	require.Equal(t, http.StatusUnauthorized, code)

	mark := p.logMark()
	cfg.extra = lateTeam
	p.writeConfig(cfg.String())
	reloaded, _ := p.waitLogFrom(mark, 15*time.Second, func(l logLine) bool { return l.str("msg") == "configuration reloaded" })
	assert.Equal(t, "watch", reloaded.str("trigger"))
	code, _ = mustGet(t, late, base+"/api/v1/feeds")
	assert.Equal(t, http.StatusOK, code, "the key added to the file")

	mark = p.logMark()
	p.writeConfig(invalidConfig)
	refused, _ := p.waitLogFrom(mark, 15*time.Second, func(l logLine) bool {
		return strings.HasPrefix(l.str("msg"), "reload refused")
	})
	assert.Equal(t, "watch", refused.str("trigger"))
	code, _ = mustGet(t, late, base+"/api/v1/feeds")
	assert.Equal(t, http.StatusOK, code, "the configuration in force stays")

	p.signal(syscall.SIGTERM)
	assert.Equal(t, 0, p.wait(30*time.Second))
}

// connTracker is a client of one connection that records which connections
// its requests used.
type connTracker struct {
	hc    *http.Client
	mu    sync.Mutex
	local []string
}

func newConnTracker() *connTracker {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = 1
	return &connTracker{hc: &http.Client{Transport: tr}}
}

func (c *connTracker) get(t testing.TB, s *signer, url string) {
	t.Helper()
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		c.mu.Lock()
		c.local = append(c.local, info.Conn.LocalAddr().String())
		c.mu.Unlock()
	}}
	ctx := httptrace.WithClientTrace(context.Background(), trace)
	resp, body, err := fetch(ctx, c.hc, s, url)
	require.NoError(t, validAnswer(resp, body, err))
}

func (c *connTracker) assertOneConnection(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.NotEmpty(t, c.local)
	for _, a := range c.local[1:] {
		assert.Equal(t, c.local[0], a, "a connection open before the reload was closed")
	}
}

// assertNoLog checks that no log line has the message msg.
func assertNoLog(t testing.TB, p *proc, msg string) {
	t.Helper()
	if l, _, _ := p.findLog(0, func(l logLine) bool { return l.str("msg") == msg }); l != nil {
		t.Errorf("unexpected log line: %v", l)
	}
}
