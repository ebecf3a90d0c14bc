package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"streamgate/config"
	"streamgate/internal/testing/testpki"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// maxUpstreamPerNetwork is the most upstream WebSocket connections a
// network of the gateway may hold at once in TestSDKStream: its few streams
// fit one connection, and a make-before-break switch (a stream added to the
// set) holds a second one for a moment.
const maxUpstreamPerNetwork = 2

// streamTimeout bounds TestSDKStream: npm ci, node and the checks.
const streamTimeout = 2 * time.Minute

// TestSDKStream runs stream.test.mjs: the SDK's createStream through the
// gateway (several streams, HA mode, an upstream drop it asks for through a
// control URL), then checks on the simulator that the gateway held few
// upstream connections however many streams the SDK opened, all signed with
// the organisation's key.
func TestSDKStream(t *testing.T) {
	node, npm := tools(t)
	t.Run("http", func(t *testing.T) { sdkStream(t, node, npm, false) })
	// The same over https:// and wss://, the SDK trusting the gateway's
	// test CA (NODE_EXTRA_CA_CERTS, as an operator gives Node.js a
	// private CA).
	t.Run("tls", func(t *testing.T) { sdkStream(t, node, npm, true) })
}

func sdkStream(t *testing.T, node, npm string, withTLS bool) {
	budget := streamTimeout
	if d, ok := t.Deadline(); ok {
		budget = min(budget, time.Until(d)-10*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	install(ctx, t, npm)

	var extra []string
	opts := servertest.Options{}
	if withTLS {
		ca := testpki.NewCA(t, "streamgate compat CA")
		dir := t.TempDir()
		leaf := ca.Issue(t, testpki.Options{})
		block := &config.TLS{}
		block.CertFile, block.KeyFile = leaf.Write(t, dir, "tls")
		caFile := filepath.Join(dir, "ca.crt")
		testpki.WriteAtomic(t, caFile, ca.CertPEM)
		opts.Config = func(c *config.Config) {
			c.Networks["mainnet"].TLS, c.Networks["testnet"].TLS = block, block
		}
		extra = append(extra, "NODE_EXTRA_CA_CERTS="+caFile)
	}
	env := servertest.Start(t, opts)
	if withTLS && (!strings.HasPrefix(env.Mainnet, "https://") || !strings.HasPrefix(env.Testnet, "https://")) {
		t.Fatalf("the gateway serves %s and %s, not https", env.Mainnet, env.Testnet)
	}
	summary := filepath.Join(t.TempDir(), "stream.json")
	vars := append([]string{
		"STREAMGATE_MAINNET_URL=" + env.Mainnet,
		"STREAMGATE_TESTNET_URL=" + env.Testnet,
		"STREAMGATE_KEY_ID=" + config.DemoKeyID,
		"STREAMGATE_KEY_SECRET=" + config.DemoKeySecret,
		"COMPAT_STREAM_SUMMARY=" + summary,
		"COMPAT_CONTROL_URL=" + controlServer(t, env),
	}, extra...)
	for _, network := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
		vars = append(vars, "COMPAT_"+strings.ToUpper(network)+"_STREAM="+strings.Join(streamFeeds(t, env, network), ","))
	}

	peak := watchOpen(env)
	start := time.Now()
	err := run(ctx, t, exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "stream.test.mjs"), vars)
	open := peak()
	t.Logf("node --test stream.test.mjs: %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("node --test stream.test.mjs: %v", err)
	}
	checkStreamUpstream(t, env, summary, open)
}

// streamFeeds returns a V3, a V7 and a V11 live stream of network, and one
// that publishes late when there is one: each publishes every second.
func streamFeeds(t *testing.T, env *servertest.Env, network string) []string {
	t.Helper()
	hidden := env.Sim.Hidden(network)
	var out []string
	seen := map[string]bool{}
	lagging := ""
	for _, s := range env.Sim.Streams(network) {
		_, _, ok := env.Sim.Window(network, s.FeedID)
		// Streams of V3, V7 and V11, the schemas stream.test.mjs checks
		// (every schema's decoding is decoded.test.mjs's).
		old := s.SchemaVersion == "V3" || s.SchemaVersion == "V7" || s.SchemaVersion == "V11"
		if !ok || !old || s.Status != "live" || slices.Contains(hidden, s.FeedID) {
			continue
		}
		if lag := lagOf(env, network, s.FeedID); lag > 0 {
			if lagging == "" {
				lagging = s.FeedID
			}
			continue
		}
		if !seen[s.SchemaVersion] {
			seen[s.SchemaVersion] = true
			out = append(out, s.FeedID)
		}
	}
	if len(out) < 2 {
		t.Fatalf("%s: fewer than two live streams publishing without delay", network)
	}
	if lagging != "" {
		out = append(out, lagging)
	}
	return out
}

// controlServer serves POST /drop?network=…: the simulator closes its open
// WebSocket connections of the network (the gateway's upstream ones) at
// once, and answers how many.
func controlServer(t *testing.T, env *servertest.Env) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		network := r.URL.Query().Get("network")
		if r.Method != http.MethodPost || r.URL.Path != "/drop" || (network != upstreamsim.Mainnet && network != upstreamsim.Testnet) {
			http.Error(w, "POST /drop?network=mainnet|testnet", http.StatusBadRequest)
			return
		}
		n := env.Sim.DropWS(upstreamsim.WSDrop{Network: network})
		t.Logf("control: dropped %d upstream WebSocket connections of %s", n, network)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"dropped":%d}`, n)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// watchOpen samples the simulator's open WebSocket connections per network
// every 10 ms until the returned function is called, which returns the
// most seen at once.
func watchOpen(env *servertest.Env) func() map[string]int64 {
	var mu sync.Mutex
	peak := map[string]int64{}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			c := env.Sim.Counters()
			mu.Lock()
			for _, network := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
				peak[network] = max(peak[network], c.WSTotal(network).Open)
			}
			mu.Unlock()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() map[string]int64 {
		close(done)
		<-stopped
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(peak)
	}
}

// checkStreamUpstream checks the simulator's side of the streams: at most
// maxUpstreamPerNetwork connections at once per network, fewer than the
// SDK's streams, none signed with a client's key.
func checkStreamUpstream(t *testing.T, env *servertest.Env, summary string, peak map[string]int64) {
	t.Helper()
	raw, err := os.ReadFile(summary)
	if err != nil {
		t.Fatalf("the stream test wrote no summary: %v", err)
	}
	var doc struct {
		Opened map[string]int64 `json:"opened"`
		Events []struct {
			Stream, Event string
		} `json:"events"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("summary: %v", err)
	}
	c := env.Sim.Counters()
	for _, x := range c.WS {
		t.Logf("  upstream ws %s key %q: accepted %d, refused %d, open %d, frames %d, dropped %d", x.Network, x.Key, x.Accepted, x.Refused, x.Open, x.Frames, x.Dropped)
		if x.Key != upstreamsim.OrgKeyID && (x.Accepted > 0 || x.Frames > 0 || x.Open > 0) {
			t.Errorf("an upstream WebSocket of %s carried the key %q: only the organisation's key may go upstream", x.Network, x.Key)
		}
	}
	for _, k := range []string{config.DemoKeyID, config.ResearchKeyID} {
		if n := c.ByKey(k); n != 0 {
			t.Errorf("%d upstream requests carried the client key %s", n, k)
		}
	}
	for _, network := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
		ws := c.WSTotal(network)
		t.Logf("%s: %d SDK streams; upstream WebSocket connections at most %d at once, %d accepted in all, %d dropped by the test",
			network, doc.Opened[network], peak[network], ws.Accepted, ws.Dropped)
		switch {
		case doc.Opened[network] == 0:
			t.Errorf("%s: the SDK opened no stream", network)
		case peak[network] < 1:
			t.Errorf("%s: no upstream WebSocket seen open while the SDK streamed", network)
		case peak[network] > maxUpstreamPerNetwork:
			t.Errorf("%s: %d upstream WebSocket connections open at once for %d SDK streams; want at most %d", network, peak[network], doc.Opened[network], maxUpstreamPerNetwork)
		}
	}
	if d := c.WSTotal(upstreamsim.Mainnet).Dropped; d == 0 {
		t.Error("mainnet: the test dropped no upstream connection")
	}
}
