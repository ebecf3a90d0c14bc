package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/proxy"
	"streamgate/server/servertest"
)

// stalledUpstream is an upstream that accepts TCP connections and never
// answers on them: a TLS handshake to it never ends. It counts the
// connections accepted, and those accepted before a call of before
// (checked at each accept) reported true.
type stalledUpstream struct {
	l      net.Listener
	before func() bool

	mu       sync.Mutex
	conns    []net.Conn
	accepted int
	early    int
}

func newStalledUpstream(t *testing.T, before func() bool) *stalledUpstream {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &stalledUpstream{l: l, before: before}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.accepted++
			if s.before() {
				s.early++
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}

func (s *stalledUpstream) counts() (accepted, early int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted, s.early
}

// TestStalledHandshakeHoldsNoBudget: an https upstream that accepts TCP
// and never answers the TLS handshake does not hold the endpoint's budget
// while each call waits for its connection. Before, the budget's hold on
// the key (kept until the request is written) covered the connect, so
// the endpoint's calls, every team's, went one per attempt timeout: the
// first report call held the key for its whole timeout, and the others,
// the research team's single request among them, were refused by the
// budget (503 "upstream budget exhausted") without their call ever being
// made. Now every call is let go in its turn, its connect stalls
// alongside the others', and each request ends on its own attempt's
// timeout.
func TestStalledHandshakeHoldsNoBudget(t *testing.T) {
	var answered atomic.Int64 // report requests answered
	up := newStalledUpstream(t, func() bool { return answered.Load() == 0 })
	env := servertest.Start(t, servertest.Options{Cold: true, Quiet: true, Config: func(cfg *config.Config) {
		n := cfg.Networks["testnet"]
		n.Upstream.URL = "https://" + up.l.Addr().String()
		n.Upstream.Timeout = 4 * time.Second
		n.Upstream.Retries = 0
		n.Upstream.Budget = config.Rate{RPS: 10, Burst: 1}
	}})

	feeds := config.DemoRestrictedFeeds()
	type call struct {
		team   string
		client *servertest.Client
		target string
	}
	var calls []call
	const demoCalls = 5
	for i := range demoCalls {
		calls = append(calls, call{config.DemoTeam, servertest.Demo(),
			"/api/v1/reports?feedID=" + string(feeds[0]) + "&timestamp=" + strconv.Itoa(1700000000+i)})
	}
	calls = append(calls, call{config.ResearchTeam, servertest.Research(),
		"/api/v1/reports?feedID=" + string(feeds[1]) + "&timestamp=1700000100"})

	type answer struct {
		status  int
		message string
	}
	answers := make([]answer, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req, err := c.client.Request(ctx, env.Testnet, c.target)
			if !assert.NoError(t, err) {
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if !assert.NoError(t, err, c.team) {
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			assert.NoError(t, err)
			answered.Add(1)
			var e struct{ Message string }
			assert.NoError(t, json.Unmarshal(body, &e), "%s: %s", c.team, body)
			answers[i] = answer{resp.StatusCode, e.Message}
		})
	}
	wg.Wait()

	// Each request, the other team's single one included, got its own
	// call's outcome: made, and timed out on the dead upstream.
	for i, a := range answers {
		assert.Equal(t, http.StatusServiceUnavailable, a.status, calls[i].team)
		assert.Equal(t, "upstream did not answer in time", a.message, "%s: its call was not made", calls[i].team)
	}
	labels := func(reason string) map[string]string {
		return map[string]string{"network": "testnet", "endpoint": "reports", "reason": reason}
	}
	assert.EqualValues(t, len(calls), servertest.MetricValue(t, env.Registry, proxy.MetricUpstreamErrors, labels("timeout")),
		"report calls made and timed out")
	assert.Zero(t, servertest.MetricValue(t, env.Registry, proxy.MetricUpstreamErrors, labels("budget")),
		"report calls refused by the budget")
	// Every report call was let go, and was connecting, before the first
	// of them ended: the stalled connects held no call back.
	accepted, early := up.counts()
	assert.GreaterOrEqual(t, early, len(calls), "connections accepted before the first answer (of %d in all)", accepted)
}
