package compat

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"streamgate/config"
	"streamgate/internal/balancer"
	"streamgate/internal/redistest"
	"streamgate/simulator"
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
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "streamgate/cmd/streamgate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building streamgate: %v\n%s", err, out)
	}

	sim, err := simulator.New(simulator.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	up := httptest.NewServer(sim.Handler(simulator.Mainnet))
	t.Cleanup(up.Close)

	cfgPath := filepath.Join(dir, "streamgate.yaml")
	cfg := fmt.Sprintf(`server:
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
`, up.URL, strings.TrimPrefix(up.URL, "http"), simulator.OrgKeyID, simulator.OrgKeySecret, rds.URL(),
		config.DemoKeyID, config.DemoKeySecret)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	bal, err := balancer.Listen("127.0.0.1:0", balancer.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bal.Close() })
	var mu sync.Mutex // serialises restarts
	book := &logBook{}
	g := &gatewayProc{t: t, bin: bin, cfg: cfgPath, book: book}
	t.Cleanup(g.kill)
	if err := g.start(); err != nil {
		t.Fatal(err)
	}
	if err := g.route(bal); err != nil {
		t.Fatal(err)
	}
	restarts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/restart" {
			http.Error(w, "POST /restart", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		began := time.Now()
		next := &gatewayProc{t: t, bin: bin, cfg: cfgPath, book: book}
		t.Cleanup(next.kill)
		if err := next.start(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := next.route(bal); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		ready := time.Since(began)
		if err := g.stop(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		bal.Remove(g.addr)
		g = next
		fmt.Fprintf(w, `{"successor_ready_after":%q,"old_stopped_after":%q}`, ready.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	}))
	t.Cleanup(restarts.Close)

	var feeds []string
	for _, s := range sim.Streams(simulator.Mainnet) {
		first, last, ok := sim.Window(simulator.Mainnet, s.FeedID)
		if ok && s.Status == "live" && sdkAccepts(s.SchemaVersion) && !slices.Contains(sim.Hidden(simulator.Mainnet), s.FeedID) &&
			time.Now().Unix()-last <= 1 && first < last && len(feeds) < 3 {
			feeds = append(feeds, s.FeedID)
		}
	}
	if len(feeds) < 2 {
		t.Fatal("fewer than two live streams publishing without delay")
	}
	vars := []string{
		"STREAMGATE_MAINNET_URL=http://" + bal.Addr(),
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

// gatewayProc is the gateway binary, run and restarted on one
// configuration.
type gatewayProc struct {
	t    *testing.T
	bin  string
	cfg  string
	book *logBook // every process's log

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	log    []string // the process's stderr
	addr   string   // host:port of mainnet
	admin  string   // host:port of the admin listener
}

// start runs the binary and returns once it serves mainnet and its
// /readyz answers 200.
func (g *gatewayProc) start() error {
	cmd := exec.Command(g.bin, "-config", g.cfg)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	g.mu.Lock()
	g.cmd, g.exited = cmd, exited
	g.mu.Unlock()
	admin := make(chan string, 1)
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.log = append(g.log, line)
			g.mu.Unlock()
			g.book.add(cmd.Process.Pid, line)
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			switch l["msg"] {
			case "admin listening":
				addr, _ := l["addr"].(string)
				select {
				case admin <- addr:
				default:
				}
			case "serving network":
				addr, _ := l["listen"].(string)
				once.Do(func() { serving <- addr })
			}
		}
		cmd.Wait()
		close(exited)
	}()
	deadline := time.After(30 * time.Second)
	var adminAddr string
	select {
	case adminAddr = <-admin:
	case <-exited:
		return fmt.Errorf("streamgate exited at start: %s", g.tail())
	case <-deadline:
		return fmt.Errorf("streamgate did not start within 30s: %s", g.tail())
	}
	select {
	case addr := <-serving:
		g.mu.Lock()
		g.addr, g.admin = addr, adminAddr
		g.mu.Unlock()
	case <-exited:
		return fmt.Errorf("streamgate exited at start: %s", g.tail())
	case <-deadline:
		return fmt.Errorf("streamgate did not serve within 30s: %s", g.tail())
	}
	for {
		resp, err := http.Get("http://" + adminAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("streamgate exited before ready: %s", g.tail())
		case <-deadline:
			return fmt.Errorf("streamgate not ready within 30s: %s", g.tail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// route puts the process behind bal and waits until bal routes to it.
func (g *gatewayProc) route(bal *balancer.Balancer) error {
	bal.Add(balancer.Backend{Addr: g.addr, Ready: "http://" + g.admin + "/readyz"})
	for deadline := time.Now().Add(30 * time.Second); !slices.Contains(bal.Ready(), g.addr); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the balancer never saw %s ready", g.addr)
		}
	}
	return nil
}

// stop sends SIGTERM, as a rolling deploy does, and waits for the exit.
func (g *gatewayProc) stop() error {
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(60 * time.Second):
		return fmt.Errorf("streamgate still running 60s after SIGTERM: %s", g.tail())
	}
}

func (g *gatewayProc) kill() {
	g.mu.Lock()
	cmd, exited := g.cmd, g.exited
	g.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}

func (g *gatewayProc) tail() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.log[max(0, len(g.log)-20):], "\n")
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
