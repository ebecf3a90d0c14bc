package main

// The tests of this package run the real streamgate binary, built once by
// TestMain, with its simulator embedded and every listener on a free
// loopback port. They learn the addresses from the JSON log on stderr.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/testing/fleet"
)

// binary is the streamgate binary under test.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "streamgate-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "streamgate")
	// With -race, the binary too is checked for races.
	if err := fleet.Build(context.Background(), ".", binary, raceEnabled); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// A second team, limited to one request per 100 s, for rejections.
const (
	tinyKeyID     = "7d1f0c2e-9a4b-4c3d-8e5f-0a1b2c3d4e5f"
	tinyKeySecret = "tiny-team-secret-0123456789abcdef"
	// A key that only a reloaded configuration holds.
	lateKeyID     = "3b9e7a51-2c4d-4f60-9a8b-7c6d5e4f3a2b"
	lateKeySecret = "late-team-secret-fedcba9876543210"
)

// testConfig is a configuration on free loopback ports with both networks
// embedded: the demo team without a rate limit and the tiny team, and no
// limit on anonymous catalog requests (the loads send many). extra is
// appended to the teams list; shutdown is server.shutdown_timeout; budget is
// mainnet's upstream budget.
type testConfig struct {
	shutdown string // default 15s
	budget   string // default {rps: 8, burst: 5}, under the simulator's 10/s
	tinyRate string // a line of the tiny team; default its rate, {rps: 0.01, burst: 1}
	extra    string
	verify   string // networks.mainnet.verify as a flow mapping; default none
}

func (c testConfig) String() string {
	shutdown, budget, tinyRate := c.shutdown, c.budget, c.tinyRate
	if shutdown == "" {
		shutdown = "15s"
	}
	if budget == "" {
		budget = "{rps: 8, burst: 5}"
	}
	if tinyRate == "" {
		tinyRate = "rate: {rps: 0.01, burst: 1}"
	}
	verifyLine := ""
	if c.verify != "" {
		verifyLine = "    verify: " + c.verify + "\n"
	}
	return fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
  shutdown_timeout: %s
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream: {url: embedded, budget: %s}
%s  testnet:
    listen: "127.0.0.1:0"
    upstream: {url: embedded, budget: {rps: 8, burst: 5}}
auth:
  anonymous_rate: {rps: 0}
teams:
  - name: demo
    networks: [mainnet, testnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
  - name: tiny
    networks: [mainnet]
    feeds: ["*"]
    %s
    keys: [{id: %s, secret: %s}]
%s`, shutdown, budget, verifyLine, config.DemoKeyID, config.DemoKeySecret, tinyRate, tinyKeyID, tinyKeySecret, c.extra)
}

// lateTeam is a team that the first configuration lacks.
var lateTeam = fmt.Sprintf(`  - name: late
    networks: [mainnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
`, lateKeyID, lateKeySecret)

// invalidConfig has several problems; a reload to it must be refused.
const invalidConfig = `server:
  shutdown_timeout: soon
networks:
  mainnet:
    listen: "127.0.0.1:0"
teams:
  - name: "no spaces allowed"
    networks: [nowhere]
    feeds: ["*"]
    keys: [{id: k, secret: tooShort42}]
`

// logLine is one line of the gateway's JSON log.
type logLine map[string]any

func (l logLine) str(key string) string {
	s, _ := l[key].(string)
	return s
}

// proc is a running streamgate process (a fleet.Proc) as the tests use it:
// every wait fails the test rather than return an error, and its cleanup
// kills it, fails the test on a data race the binary reported and logs
// the process's log when the test failed.
type proc struct {
	*fleet.Proc
	t       testing.TB
	cfgPath string

	// A copy of the log as it comes, for the tests that read it whole.
	mu    sync.Mutex
	lines []logLine
	raw   []string

	net   map[string]string // network → base URL
	admin string            // admin base URL
}

// start writes cfg to a file and runs "streamgate -config FILE args...",
// waiting until the admin listener and every network in networks serve.
func start(t testing.TB, cfg string, networks []string, args ...string) *proc {
	t.Helper()
	return startFiles(t, cfg, nil, networks, args...)
}

// startFiles is start with more files (name → content) written beside the
// configuration first.
func startFiles(t testing.TB, cfg string, files map[string]string, networks []string, args ...string) *proc {
	t.Helper()
	p, err := tryStartFiles(t, cfg, files, networks, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tryStartFiles is startFiles returning its failure, with the end of the
// log; the failure wraps syscall.EADDRINUSE when a listener's address was
// in use.
func tryStartFiles(t testing.TB, cfg string, files map[string]string, networks []string, args ...string) (*proc, error) {
	t.Helper()
	p := &proc{t: t}
	fp, err := fleet.StartProc(fleet.ProcConfig{Binary: binary, Dir: t.TempDir(), Config: cfg, Files: files,
		Networks: networks, Args: args, Log: p.record})
	if err != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, line := range p.raw {
			if strings.Contains(line, syscall.EADDRINUSE.Error()) {
				err = fmt.Errorf("%w (%w)", err, syscall.EADDRINUSE)
				break
			}
		}
		return nil, fmt.Errorf("%w; streamgate log (last lines):\n%s", err, strings.Join(p.raw[max(0, len(p.raw)-60):], "\n"))
	}
	p.use(fp)
	return p, nil
}

// use makes p the test's view of fp and registers its cleanup.
func (p *proc) use(fp *fleet.Proc) {
	p.Proc, p.cfgPath, p.net, p.admin = fp, fp.ConfigPath(), fp.Net, fp.Admin
	watch(p.t, fp)
}

// record keeps a copy of a log line.
func (p *proc) record(_ int, raw string) {
	var l logLine
	if json.Unmarshal([]byte(raw), &l) != nil {
		l = logLine{"raw": raw}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.raw = append(p.raw, raw)
	p.lines = append(p.lines, l)
}

// watch has the test's cleanup kill p, fail the test on a data race the
// binary reported, and, when the test failed, log the end of p's log.
func watch(t testing.TB, p *fleet.Proc) {
	t.Cleanup(func() {
		p.Kill()
		raw := p.Raw()
		for _, line := range raw {
			if strings.Contains(line, "DATA RACE") {
				t.Errorf("the binary reported a data race:\n%s", strings.Join(raw, "\n"))
				return
			}
		}
		if t.Failed() {
			t.Logf("streamgate log (last lines):\n%s", strings.Join(raw[max(0, len(raw)-60):], "\n"))
			var notable []string // what the access log's lines would bury
			for _, line := range raw {
				if !strings.Contains(line, `"msg":"request"`) {
					notable = append(notable, line)
				}
			}
			t.Logf("streamgate log, all but the access log (last lines):\n%s", strings.Join(notable[max(0, len(notable)-40):], "\n"))
		}
	})
}

// writeConfig replaces the configuration file atomically.
func (p *proc) writeConfig(cfg string) {
	p.t.Helper()
	require.NoError(p.t, p.WriteConfig(cfg))
}

func (p *proc) done() bool { return p.Done() }

// findLog returns the first line from index from on that matches, and the
// index after it.
func (p *proc) findLog(from int, match func(logLine) bool) (logLine, int, <-chan struct{}) {
	l, next, changed := p.FindLog(from, func(l fleet.Line) bool { return match(logLine(l)) })
	return logLine(l), next, changed
}

// waitLog waits for a log line that matches, failing the test after timeout
// or when the process ends first.
func (p *proc) waitLog(timeout time.Duration, match func(logLine) bool) logLine {
	p.t.Helper()
	l, _ := p.waitLogFrom(0, timeout, match)
	return l
}

// waitLogFrom is waitLog for lines from index from on; it returns the index
// after the line found, for the next wait.
func (p *proc) waitLogFrom(from int, timeout time.Duration, match func(logLine) bool) (logLine, int) {
	p.t.Helper()
	l, next, err := p.WaitLogFrom(from, timeout, func(l fleet.Line) bool { return match(logLine(l)) })
	if err != nil {
		p.t.Fatal(err)
	}
	return logLine(l), next
}

// logMark is the number of log lines so far: waits from it see only later ones.
func (p *proc) logMark() int { return p.Mark() }

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.Signal(sig))
}

// wait waits for the process to end and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	code, err := p.Wait(timeout)
	require.NoError(p.t, err)
	return code
}

// signer signs requests with one key, never twice with the same timestamp
// for the same target: the gateway refuses a signature it has seen.
type signer struct {
	key, secret string
	mu          sync.Mutex
	last        map[string]int64 // request URI → last timestamp used, ms
}

func newSigner(key, secret string) *signer {
	return &signer{key: key, secret: secret, last: map[string]int64{}}
}

func (s *signer) sign(req *http.Request) {
	uri := req.URL.RequestURI()
	s.mu.Lock()
	ms := max(time.Now().UnixMilli(), s.last[uri]+1)
	s.last[uri] = ms
	s.mu.Unlock()
	auth.Sign(req, s.key, []byte(s.secret), time.UnixMilli(ms))
}

// fetch makes a GET request, signed when s is not nil, and reads the whole
// answer.
func fetch(ctx context.Context, hc *http.Client, s *signer, url string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	if s != nil {
		s.sign(req)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// mustGet is fetch for a test's own checks: it fails on any error.
func mustGet(t testing.TB, s *signer, url string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, body, err := fetch(ctx, http.DefaultClient, s, url)
	require.NoError(t, err, url)
	return resp.StatusCode, body
}

// feedIDs returns n live streams of schemas V3, V7 and V11 of the
// network's public catalog.
func feedIDs(t testing.TB, base string, n int) []string {
	t.Helper()
	code, body := mustGet(t, nil, base+"/api/v1/discovery")
	require.Equal(t, http.StatusOK, code, string(body))
	var doc struct {
		Feeds []struct {
			FeedID string `json:"feedId"`
			Status string `json:"status"`
		} `json:"feeds"`
	}
	require.NoError(t, json.Unmarshal(body, &doc))
	var out []string
	for _, f := range doc.Feeds {
		// The streams of V3, V7 and V11 only, which these tests were
		// written for: those of the other schemas sort before them by ID.
		old := strings.HasPrefix(f.FeedID, "0x0003") || strings.HasPrefix(f.FeedID, "0x0007") || strings.HasPrefix(f.FeedID, "0x000b")
		if f.Status == "live" && old && len(out) < n {
			out = append(out, f.FeedID)
		}
	}
	require.Len(t, out, n, "live streams in the catalog")
	return out
}

// pastTS returns a distinct timestamp, in seconds, inside the simulator's
// history, for each call: a report that no cache holds yet.
func pastTS() func() int64 {
	base := time.Now().Add(-3 * time.Hour).Unix()
	var mu sync.Mutex
	n := int64(0)
	return func() int64 {
		mu.Lock()
		defer mu.Unlock()
		n++
		return base - n
	}
}

func reportURL(base, feed string, ts int64) string {
	return base + "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10)
}

// isDialError reports whether err is a refused connection: the request never
// reached the server.
func isDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// validAnswer checks that an answer is a complete 200 with a JSON body.
func validAnswer(resp *http.Response, body []byte, err error) error {
	switch {
	case err != nil:
		return err
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	case !json.Valid(body):
		return fmt.Errorf("a 200 whose body is not JSON (%d bytes)", len(body))
	}
	return nil
}
