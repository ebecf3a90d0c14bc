package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/status"
	"streamgate/upstreamsim"
)

// chromium finds a Chromium to drive, or skips the test saying what to
// install (with CI=true, a missing browser fails the test instead).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium found: install it (Debian: apt-get install -y chromium) to run the status page's browser test"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// statusConfig is the demo's two teams on free loopback ports, the
// research team limited to one request per 100 s so that it is refused.
func statusConfig() string {
	return fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
networks:
  mainnet:
    listen: "127.0.0.1:0"
    upstream: {url: embedded}
  testnet:
    listen: "127.0.0.1:0"
    upstream: {url: embedded}
teams:
  - name: %s
    networks: [mainnet, testnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
  - name: %s
    networks: [testnet]
    feeds: ["*"]
    rate: {rps: 0.01, burst: 1}
    daily_quota: 10000
    keys: [{id: %s, secret: %s}]
`, config.DemoTeam, config.DemoKeyID, config.DemoKeySecret, config.ResearchTeam, config.ResearchKeyID, config.ResearchKeySecret)
}

// TestStatusPageInABrowser drives traffic from two teams, one of them over
// its rate, then loads the admin listener's status page in headless
// Chromium and checks what a person would see against /status.json.
func TestStatusPageInABrowser(t *testing.T) {
	execPath := chromium(t)
	t.Setenv("STREAMGATE_STATUS_INTERVAL", "200ms")
	p := start(t, statusConfig(), []string{"mainnet", "testnet"})
	waitReady(t, p)

	demo := newSigner(config.DemoKeyID, config.DemoKeySecret)
	research := newSigner(config.ResearchKeyID, config.ResearchKeySecret)
	for _, base := range []string{p.net["mainnet"], p.net["testnet"]} {
		for range 5 {
			code, _ := mustGet(t, demo, base+"/api/v1/feeds")
			require.Equal(t, http.StatusOK, code)
		}
	}
	codes := map[int]int{}
	for range 6 {
		code, _ := mustGet(t, research, p.net["testnet"]+"/api/v1/feeds")
		codes[code]++
	}
	require.Equal(t, map[int]int{200: 1, 429: 5}, codes, "the research team: one admitted, then refused")

	// Wait until a sample holds every request made.
	var snap status.Snapshot
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := mustGet(t, nil, p.admin+"/status.json")
		require.Equal(t, http.StatusOK, code)
		require.NoError(t, json.Unmarshal(body, &snap))
		if teamOf(snap, config.DemoTeam).Requests == 10 && teamOf(snap, config.ResearchTeam).Requests == 6 {
			break
		}
		require.True(t, time.Now().Before(deadline), "/status.json never counted the requests: %s", body)
		time.Sleep(100 * time.Millisecond)
	}
	require.EqualValues(t, 5, teamOf(snap, config.ResearchTeam).RateLimited)

	// The browser.
	ctx := browser(t, execPath)

	var (
		mu       sync.Mutex
		consoles []string
		requests []string
	)
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeWarning {
				consoles = append(consoles, fmt.Sprintf("console %s: %v", ev.Type, ev.Args))
			}
		case *runtime.EventExceptionThrown:
			consoles = append(consoles, "exception: "+ev.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded: // CSP violations, failed loads
			if ev.Entry.Level == cdplog.LevelError || ev.Entry.Level == cdplog.LevelWarning {
				consoles = append(consoles, fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		}
	})
	var shot []byte
	var svgs []string
	var bodyText string
	err := chromedp.Run(ctx,
		network.Enable(),
		runtime.Enable(),
		cdplog.Enable(),
		chromedp.Navigate(p.admin+"/"),
		chromedp.WaitVisible("#teams", chromedp.ByID),
		chromedp.Text("body", &bodyText, chromedp.ByQuery),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("svg.spark polyline")).map(e => e.getAttribute("points"))`, &svgs),
		chromedp.FullScreenshot(&shot, 90),
	)
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "status-page.png")
	require.NoError(t, os.WriteFile(path, shot, 0o644))
	t.Logf("screenshot of the status page: %s", path)

	// What the page reads, against /status.json (read again: the page may
	// be a sample newer).
	for _, n := range []string{"mainnet", "testnet"} {
		assert.Contains(t, bodyText, "Network "+n)
	}
	var rows map[string][]string
	err = chromedp.Run(ctx, chromedp.Evaluate(`Object.fromEntries(Array.from(document.querySelectorAll("tr.team")).map(r => [r.cells[0].innerText, Array.from(r.cells).map(c => c.innerText)]))`, &rows))
	require.NoError(t, err)
	for _, team := range []string{config.DemoTeam, config.ResearchTeam} {
		row, ok := rows[team]
		require.True(t, ok, "team %s on the page: %v", team, rows)
		want := teamOf(snap, team)
		assert.Equal(t, strconv.FormatInt(want.Requests, 10), row[1], "team %s: requests", team)
		assert.Equal(t, strconv.FormatInt(want.RateLimited, 10), row[3], "team %s: rate-limited", team)
	}
	assert.Equal(t, "5", rows[config.ResearchTeam][3], "the research team's refusals")
	assert.Contains(t, rows[config.ResearchTeam][2], "429 5")
	assert.GreaterOrEqual(t, len(svgs), 7, "charts: the cache's and three per network")

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, consoles, "console errors")
	require.NotEmpty(t, requests)
	for _, u := range requests {
		assert.True(t, strings.HasPrefix(u, p.admin+"/"), "a request left the admin origin: %s", u)
	}
	// No secret, no key ID, no organisation credential on the page or in
	// the JSON.
	_, page := mustGet(t, nil, p.admin+"/")
	_, js := mustGet(t, nil, p.admin+"/status.json")
	for _, secret := range []string{config.DemoKeySecret, config.ResearchKeySecret, config.DemoKeyID, config.ResearchKeyID,
		upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret} {
		assert.NotContains(t, string(page), secret)
		assert.NotContains(t, string(js), secret)
	}
}

// browser starts headless Chromium for the test and returns its context,
// bounded to a minute.
func browser(t *testing.T, execPath string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1600),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

// TestStatusHeadlineInABrowser loads the status page in headless Chromium
// in each state of its headline: all well, the upstream down, the Redis
// breaker open. Each time the headline a person sees (its state, its
// colour's class and every reason) is the one /status.json gives.
func TestStatusHeadlineInABrowser(t *testing.T) {
	execPath := chromium(t)
	r := startStatusRig(t)
	ctx := browser(t, execPath)
	feed := feedIDs(t, r.p.net["mainnet"], 1)[0]
	code, _ := r.get(reportURL("", feed, r.ts()))
	require.Equal(t, http.StatusOK, code)

	look := func(state string, want ...string) {
		t.Helper()
		snap := r.waitSnapshot("the state "+state, func(s status.Snapshot) bool {
			codes := []string{}
			for _, r := range s.Health.Reasons {
				codes = append(codes, r.Code)
			}
			return s.Health.State == state && reasonCodes(codes) == reasonCodes(slices.Clone(want))
		})
		var (
			shown, class, headline string
			reasons                []string
			shot                   []byte
		)
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(r.p.admin+"/"),
			chromedp.WaitVisible("#health", chromedp.ByID),
			chromedp.AttributeValue("#health", "data-state", &shown, nil, chromedp.ByID),
			chromedp.AttributeValue("#health", "class", &class, nil, chromedp.ByID),
			chromedp.Text("#health", &headline, chromedp.ByID),
			chromedp.Evaluate(`Array.from(document.querySelectorAll("#health li.reason")).map(e => e.dataset.code)`, &reasons),
			chromedp.FullScreenshot(&shot, 90),
		))
		path := filepath.Join(t.TempDir(), "status-"+state+"-"+strings.Join(want, "-")+".png")
		require.NoError(t, os.WriteFile(path, shot, 0o644))
		t.Logf("screenshot of the status page (%s %v): %s", state, want, path)

		// The page may be a sample newer than the JSON read: read it again
		// if they differ, once the page is rendered.
		if shown != snap.Health.State {
			snap, _ = r.snapshot()
		}
		assert.Equal(t, snap.Health.State, shown)
		assert.Contains(t, class, "health "+state)
		if state == status.StateWell {
			assert.True(t, strings.HasPrefix(headline, "All well"), headline)
			assert.Empty(t, reasons)
			return
		}
		assert.True(t, strings.HasPrefix(headline, "Degraded"), headline)
		assert.Equal(t, reasonCodes(slices.Clone(want)), reasonCodes(reasons))
		for _, r := range snap.Health.Reasons {
			assert.Contains(t, headline, r.Text, "the reason's text is on the page")
		}
	}

	look(status.StateWell)

	r.outage(true)
	code, _ = r.get(reportURL("", feed, r.ts()))
	require.GreaterOrEqual(t, code, 500)
	look(status.StateDegraded, status.ReasonUpstreamDown)
	r.outage(false)
	code, _ = r.get(reportURL("", feed, r.ts()))
	require.Equal(t, http.StatusOK, code)
	look(status.StateWell)

	r.redis.Stop()
	r.waitSnapshot("the Redis breaker open", func(s status.Snapshot) bool {
		r.get("/api/v1/feeds")
		return strings.Contains(fromJSON(s).Reasons, status.ReasonRedisBreaker)
	})
	look(status.StateDegraded, status.ReasonRedisBreaker)
}

func teamOf(s status.Snapshot, name string) status.Team {
	for _, t := range s.Teams {
		if t.Name == name {
			return t
		}
	}
	return status.Team{}
}
