package compat

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"streamgate/config"
	"streamgate/internal/testing/fleet"
	"streamgate/internal/testing/redistest"
	"streamgate/upstreamsim"
)

// restartTimeout bounds TestSDKStreamRestart: the build, npm ci, node and
// the restart.
const restartTimeout = 4 * time.Minute

// TestSDKStreamRestart runs restart.test.mjs: the SDK's createStream, plain
// and in haMode, through a gateway process (the real binary, its limits
// and stream state in a redis-server) behind a readiness-aware balancer,
// which the script has restarted mid-stream as a Kubernetes rolling update
// does: the new process started and ready first, then the old one
// SIGTERMed (it turns not ready, drains and exits); every second of every
// stream must reach the application.
func TestSDKStreamRestart(t *testing.T) {
	node, npm := tools(t)
	rds := redistest.New(t) // skips when redis-server is missing
	budget := restartTimeout
	if d, ok := t.Deadline(); ok {
		budget = min(budget, time.Until(d)-10*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	install(ctx, t, npm)

	dir := t.TempDir()
	bin := filepath.Join(dir, "streamgate")
	if err := fleet.Build(ctx, "streamgate/cmd/streamgate", bin, false); err != nil {
		t.Fatal(err)
	}
	book := &logBook{}
	f, err := fleet.Start(fleet.Config{Binary: bin, Dir: dir, Replicas: 1, Log: book.add,
		Gateway: func(upstream string) string {
			return fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
  shutdown_timeout: 20s
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream:
      url: %s
      ws_url: ws%s
      api_key: %s
      api_secret: %s
      budget: {rps: 8, burst: 8}
auth:
  anonymous_rate: {rps: 0}
ratelimit:
  backend: redis
  redis: {url: "%s"}
teams:
  - name: demo
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
`, upstream, strings.TrimPrefix(upstream, "http"), upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, rds.URL(),
				config.DemoKeyID, config.DemoKeySecret)
		}})
	if err != nil {
		book.dump(t)
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	sim := f.Sim
	var mu sync.Mutex // serialises restarts
	restarts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/restart" {
			http.Error(w, "POST /restart", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		began := time.Now()
		ready, err := f.Surge(0)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"successor_ready_after":%q,"old_stopped_after":%q}`, ready.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}))
	t.Cleanup(restarts.Close)

	var feeds []string
	for _, s := range sim.Streams(upstreamsim.Mainnet) {
		first, last, ok := sim.Window(upstreamsim.Mainnet, s.FeedID)
		if ok && s.Status == "live" && sdkAccepts(s.SchemaVersion) && !slices.Contains(sim.Hidden(upstreamsim.Mainnet), s.FeedID) &&
			time.Now().Unix()-last <= 1 && first < last && len(feeds) < 3 {
			feeds = append(feeds, s.FeedID)
		}
	}
	if len(feeds) < 2 {
		t.Fatal("fewer than two live streams publishing without delay")
	}
	vars := []string{
		"STREAMGATE_MAINNET_URL=" + f.Base(),
		"STREAMGATE_KEY_ID=" + config.DemoKeyID,
		"STREAMGATE_KEY_SECRET=" + config.DemoKeySecret,
		"COMPAT_MAINNET_STREAM=" + strings.Join(feeds, ","),
		"COMPAT_RESTART_URL=" + restarts.URL,
	}
	err = run(ctx, t, exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "restart.test.mjs"), vars)
	if err != nil {
		book.dump(t)
		t.Fatalf("node --test restart.test.mjs: %v", err)
	}
}

// logBook is the log of every gateway process of a test, in order.
type logBook struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBook) add(pid int, line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, strconv.Itoa(pid)+" "+line)
}

// dump logs every line but the access lines of other than WebSocket
// requests.
func (b *logBook) dump(t *testing.T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var keep []string
	for _, l := range b.lines {
		if !strings.Contains(l, `"msg":"request"`) || strings.Contains(l, `"endpoint":"ws"`) {
			keep = append(keep, l)
		}
	}
	t.Logf("streamgate logs (pid, line; last 120):\n%s", strings.Join(keep[max(0, len(keep)-120):], "\n"))
}
