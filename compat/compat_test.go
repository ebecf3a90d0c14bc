// Package compat proves that the official TypeScript SDK of the Data Streams
// API (@chainlink/data-streams-sdk from npm, unchanged) works through
// streamgate: TestSDK runs a whole gateway on the simulator and the SDK's
// test suite, sdk.test.mjs, against it, then checks on the simulator what
// reached the upstream.
package compat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"streamgate/config"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// timeout bounds the whole test: npm ci, node and the checks.
const timeout = 3 * time.Minute

// skipMessage is the reason given when node or npm is missing outside CI.
const skipMessage = "node not installed: skipping the SDK compatibility test (install nodejs and npm)"

func TestSDK(t *testing.T) {
	node, npm := tools(t)

	budget := timeout
	if d, ok := t.Deadline(); ok {
		budget = min(budget, time.Until(d)-10*time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()

	start := time.Now()
	install(ctx, t, npm)
	installed := time.Since(start)

	env := servertest.Start(t, servertest.Options{})
	summary := filepath.Join(t.TempDir(), "requests.json")
	vars := sdkEnv(t, env, time.Now().Unix()-600)
	vars = append(vars, "COMPAT_SUMMARY="+summary)

	start = time.Now()
	err := run(ctx, t, exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk.test.mjs"), vars)
	t.Logf("npm ci: %v; node --test: %v", installed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("node --test sdk.test.mjs: %v", err)
	}
	checkUpstream(t, env, summary)
}

// tools returns the paths of node and npm, or skips t when either is
// missing; in CI (CI=true) a missing tool fails t instead.
func tools(t *testing.T) (node, npm string) {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if err := errors.Join(errNode, errNpm); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI must run the SDK compatibility test: %v (install nodejs and npm)", err)
		}
		t.Skip(skipMessage)
	}
	return node, npm
}

// install runs npm ci when node_modules is missing or older than
// package-lock.json. npm writes node_modules/.package-lock.json last, so an
// interrupted install is redone.
func install(ctx context.Context, t *testing.T, npm string) {
	t.Helper()
	unlock, err := lockFile("package-lock.json")
	if err != nil {
		t.Fatalf("locking package-lock.json: %v", err)
	}
	defer unlock()
	lock, err := os.Stat("package-lock.json")
	if err != nil {
		t.Fatalf("compat/package-lock.json: %v", err)
	}
	if done, err := os.Stat(filepath.Join("node_modules", ".package-lock.json")); err == nil && !done.ModTime().Before(lock.ModTime()) {
		return
	}
	t.Log("installing the SDK: npm ci")
	if err := run(ctx, t, exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund"), nil); err != nil {
		t.Fatalf("npm ci: %v", err)
	}
}

// run runs cmd in this directory with the environment plus vars, its output
// line by line to t.Log. When ctx ends, cmd and its children are killed.
func run(ctx context.Context, t *testing.T, cmd *exec.Cmd, vars []string) error {
	t.Helper()
	cmd.Env = append(append(os.Environ(), "NO_COLOR=1", "FORCE_COLOR=0"), vars...)
	cmd.WaitDelay = 10 * time.Second
	killGroup(cmd)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		t.Log(sc.Text())
	}
	io.Copy(io.Discard, pr) // after an overlong line
	err := <-done
	if ctx.Err() != nil {
		return fmt.Errorf("%w: the test's time budget ran out: %v", ctx.Err(), err)
	}
	return err
}

// sdkEnv returns the environment of sdk.test.mjs: the gateway, the keys,
// and streams of each schema with a report at ts on both networks.
func sdkEnv(t *testing.T, env *servertest.Env, ts int64) []string {
	t.Helper()
	vars := []string{
		"STREAMGATE_MAINNET_URL=" + env.Mainnet,
		"STREAMGATE_TESTNET_URL=" + env.Testnet,
		"STREAMGATE_KEY_ID=" + config.DemoKeyID,
		"STREAMGATE_KEY_SECRET=" + config.DemoKeySecret,
		"STREAMGATE_RESEARCH_KEY_ID=" + config.ResearchKeyID,
		"STREAMGATE_RESEARCH_KEY_SECRET=" + config.ResearchKeySecret,
		"COMPAT_TIMESTAMP=" + strconv.FormatInt(ts, 10),
		"COMPAT_FEEDS_EXACT=1",
	}
	restricted := upstreamsim.RestrictedStreams()
	for _, network := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
		N := strings.ToUpper(network)
		hidden := env.Sim.Hidden(network)
		bySchema := map[string][]string{}
		var feeds []string
		var noData, lagging, denied string
		maxLag := int64(1)
		for _, s := range env.Sim.Streams(network) {
			if slices.Contains(hidden, s.FeedID) {
				continue
			}
			feeds = append(feeds, s.FeedID)
			first, last, ok := env.Sim.Window(network, s.FeedID)
			if !ok || ts < first || ts > last {
				if noData == "" {
					noData = s.FeedID
				}
				continue
			}
			if len(bySchema[s.SchemaVersion]) < 2 && (s.SchemaVersion != "V3" || lagOf(env, network, s.FeedID) == 0) {
				bySchema[s.SchemaVersion] = append(bySchema[s.SchemaVersion], s.FeedID)
			}
			if lag := lagOf(env, network, s.FeedID); lag > maxLag {
				lagging, maxLag = s.FeedID, lag
			}
			if network == upstreamsim.Testnet && denied == "" && sdkAccepts(s.SchemaVersion) && !slices.Contains(restricted, s.FeedID) {
				denied = s.FeedID
			}
		}
		for _, schema := range []string{"V3", "V7", "V11"} {
			if len(bySchema[schema]) == 0 {
				t.Fatalf("no %s stream with a report at %d on %s", schema, ts, network)
			}
			vars = append(vars, fmt.Sprintf("COMPAT_%s_%s=%s", N, schema, strings.Join(bySchema[schema], ",")))
		}
		vars = append(vars,
			"COMPAT_"+N+"_FEEDS="+strings.Join(feeds, ","),
			"COMPAT_"+N+"_NODATA="+noData,
			"COMPAT_"+N+"_LAGGING="+lagging)
		if network == upstreamsim.Testnet {
			vars = append(vars, "COMPAT_RESEARCH_FEEDS="+strings.Join(restricted, ","), "COMPAT_RESEARCH_DENIED="+denied)
		}
	}
	return vars
}

// lagOf returns the publication delay of a stream: how far its newest
// report is behind the clock, read within one second.
func lagOf(env *servertest.Env, network, feedID string) int64 {
	for {
		before := time.Now().Unix()
		_, last, _ := env.Sim.Window(network, feedID)
		if now := time.Now().Unix(); now == before {
			return now - last
		}
	}
}

// sdkRequest is a request sdk.test.mjs saw the SDK send.
type sdkRequest struct {
	Network string `json:"network"`
	Path    string `json:"path"`
	Status  int    `json:"status"`
	Cache   string `json:"cache"`
}

// checkUpstream checks, on the simulator's counters, that every upstream
// call was signed with the organisation's key (a client's own credentials
// never go upstream) and that the cache spared the upstream the SDK's
// repeated reads.
func checkUpstream(t *testing.T, env *servertest.Env, summary string) {
	t.Helper()
	raw, err := os.ReadFile(summary)
	if err != nil {
		t.Fatalf("the SDK test wrote no summary: %v", err)
	}
	var doc struct {
		SDKVersion string       `json:"sdkVersion"`
		Requests   []sdkRequest `json:"requests"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("summary: %v", err)
	}

	up := env.Sim.Counters()
	t.Logf("SDK %s sent %d requests; the upstream received %d", doc.SDKVersion, len(doc.Requests), up.Total())
	for _, c := range up.Counts {
		t.Logf("  upstream %s %s %d: %d", c.Network, c.Endpoint, c.Status, c.N)
	}
	if up.Total() == 0 {
		t.Fatal("the upstream received no call")
	}
	for _, k := range []string{config.DemoKeyID, config.ResearchKeyID} {
		if n := up.ByKey(k); n != 0 {
			t.Errorf("%d upstream calls were signed with the client key %s: a client's credentials must never go upstream", n, k)
		}
	}
	if n := up.ByKey(upstreamsim.OrgKeyID); n != up.Total() {
		t.Errorf("%d of %d upstream calls were not signed with the organisation key", up.Total()-n, up.Total())
	}
	if int64(len(doc.Requests)) <= up.Total() {
		t.Errorf("the upstream received %d calls for the SDK's %d requests: the cache spared none", up.Total(), len(doc.Requests))
	}

	ok := func(endpoint string, status int) bool {
		return status == 200 || endpoint == upstreamsim.EndpointBulk && status == 206
	}
	for _, network := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
		for _, endpoint := range []string{upstreamsim.EndpointReport, upstreamsim.EndpointPage, upstreamsim.EndpointBulk, upstreamsim.EndpointLatest} {
			var sdk int64
			for _, r := range doc.Requests {
				if r.Network == network && r.Path == endpoint && ok(endpoint, r.Status) {
					sdk++
				}
			}
			upstream := up.Sum(func(c upstreamsim.Count) bool {
				return c.Network == network && c.Endpoint == endpoint && ok(endpoint, c.Status)
			})
			t.Logf("%s %s: %d answered SDK requests, %d upstream calls", network, endpoint, sdk, upstream)
			switch {
			case sdk == 0:
				t.Errorf("%s %s: the SDK made no successful request", network, endpoint)
			case endpoint == upstreamsim.EndpointLatest && upstream > sdk:
				t.Errorf("%s %s: %d upstream calls for %d SDK requests", network, endpoint, upstream, sdk)
			case endpoint != upstreamsim.EndpointLatest && upstream >= sdk:
				t.Errorf("%s %s: %d upstream calls for %d SDK requests, repeated reads included: the cache did not serve them", network, endpoint, upstream, sdk)
			}
		}
	}
}

// sdkAccepts reports whether the TypeScript SDK (1.2.1) takes a stream ID
// of the schema: its validateFeedId refuses, before any request, every ID
// but those of V2 to V13 (not V1, which only the Go SDK decodes, nor V14).
func sdkAccepts(schemaVersion string) bool {
	switch schemaVersion {
	case "V1", "V14":
		return false
	}
	return strings.HasPrefix(schemaVersion, "V")
}
