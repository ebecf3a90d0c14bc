package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
)

// adminGet reads url of the admin listener with the admin token (none
// when token is "").
func adminGet(t *testing.T, url, token string) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, url)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, body
}

// chartBars is a history answer as the test reads it: the bars as
// [t, o, h, l, c] rows.
func chartBars(t *testing.T, body []byte) [][5]float64 {
	t.Helper()
	var h struct {
		S          string
		T          []float64
		O, H, L, C []float64
		Missing    []any
	}
	require.NoError(t, json.Unmarshal(body, &h), string(body))
	require.Equal(t, "ok", h.S, string(body))
	require.Empty(t, h.Missing, "the span is filled whole: %s", body)
	out := make([][5]float64, len(h.T))
	for i := range h.T {
		out[i] = [5]float64{h.T[i], h.O[i], h.H[i], h.L[i], h.C[i]}
	}
	return out
}

// TestChartPageInABrowser: a span of a stream the archive does not hold
// is read through the admin listener's chart data (its bars filled from
// the upstream); the status page then lists the stream, linked to its
// candle chart, behind the admin token; in headless Chromium the chart
// page, opened from that link and at a chosen resolution and span, draws
// exactly the bars the JSON has (every bar's open time and values, its
// wick from high to low around its body), reading nothing but the admin
// listener.
func TestChartPageInABrowser(t *testing.T) {
	execPath := chromium(t)
	t.Setenv("STREAMGATE_STATUS_INTERVAL", "200ms")
	const token = "chart-test-admin-token"
	p := start(t, fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
  admin_token: %s
networks:
  testnet:
    listen: "127.0.0.1:0"
    upstream: {url: embedded}
archive:
  backend: pebble
  path: %q
teams:
  - name: %s
    networks: [testnet]
    feeds: ["*"]
    keys: [{id: %s, secret: %s}]
`, token, t.TempDir(), config.DemoTeam, config.DemoKeyID, config.DemoKeySecret), []string{"testnet"})
	waitReady(t, p)
	feed := feedIDs(t, p.net["testnet"], 1)[0]

	// Fifteen minutes ending three minutes ago, on 5-minute bounds.
	now := time.Now().Unix() - 180
	to := now - now%300 - 1
	from := to - 899
	history := func(res string) string {
		return fmt.Sprintf("%s/chart/history?network=testnet&feedID=%s&resolution=%s&from=%d&to=%d", p.admin, feed, res, from, to)
	}
	code, _, body := adminGet(t, history("1m"), "")
	require.Equal(t, http.StatusUnauthorized, code, "behind the admin token: %s", body)
	// The archive holds none of it: filled from the upstream, a bounded
	// number of pages a request (fewer when the fill share's tokens come
	// slowly), each request going on where the one before stopped.
	code, hdr, body := adminGet(t, history("1m"), token)
	require.Equal(t, http.StatusOK, code, string(body))
	assert.NotEqual(t, "0", hdr.Get("X-Streamgate-Fill-Pages"), "the first request filled from the upstream")
	for range 30 {
		if !strings.Contains(string(body), `"missing"`) {
			break
		}
		code, _, body = adminGet(t, history("1m"), token)
		require.Equal(t, http.StatusOK, code, string(body))
	}
	want1 := chartBars(t, body)
	require.Len(t, want1, 15)
	code, hdr, body = adminGet(t, history("1m"), token)
	require.Equal(t, http.StatusOK, code, string(body))
	assert.Equal(t, want1, chartBars(t, body))
	assert.Equal(t, "0", hdr.Get("X-Streamgate-Fill-Pages"), "filled once: from the archive alone")
	code, _, body = adminGet(t, history("5m"), token)
	require.Equal(t, http.StatusOK, code, string(body))
	want5 := chartBars(t, body)
	require.Len(t, want5, 3)
	code, _, body = adminGet(t, fmt.Sprintf("%s/chart/history?network=testnet&feedID=%s&resolution=2&from=%d&to=%d", p.admin, feed, from, to), token)
	require.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, string(body), `invalid resolution \"2\"`)
	code, _, body = adminGet(t, p.admin+"/chart?network=testnet&feedID="+feed, "")
	require.Equal(t, http.StatusUnauthorized, code, "the page too: %s", body)

	// The status page lists the stream once a sample has read it.
	var listed status.ArchiveStream
	require.Eventually(t, func() bool {
		code, _, body := adminGet(t, p.admin+"/status.json", token)
		require.Equal(t, http.StatusOK, code, string(body))
		var snap status.Snapshot
		require.NoError(t, json.Unmarshal(body, &snap))
		if snap.Archive == nil {
			return false
		}
		for _, s := range snap.Archive.Streams {
			if s.FeedID == feed && s.Network == "testnet" && s.Last >= uint32(to) && s.Covered >= 900 {
				listed = s // a sample after the fill
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the archived stream on /status.json")
	assert.True(t, listed.Reports)
	assert.LessOrEqual(t, listed.First, uint32(from))
	assert.GreaterOrEqual(t, listed.Last, uint32(to))
	assert.GreaterOrEqual(t, listed.Covered, uint64(900))

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
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.LevelError || ev.Entry.Level == cdplog.LevelWarning {
				consoles = append(consoles, fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		}
	})
	drawn := func(what string) chromedp.Action {
		return chromedp.Poll(`(() => { const c = document.getElementById("chart"); return c && c.dataset.state !== "loading" && location.search.includes(`+
			fmt.Sprintf("%q", what)+`) })()`, nil, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))
	}
	var (
		href, state string
		rows        [][5]float64
		geometry    []string
	)
	const readBars = `Array.from(document.querySelectorAll("#bars g.bar")).map(g => ["t", "o", "h", "l", "c"].map(k => Number(g.dataset[k])))`
	// Every bar: its wick spans high to low, its body lies within the
	// wick (open to close), and the bars go left to right.
	const checkGeometry = `(() => { const out = []; let lastX = -1;
		for (const g of document.querySelectorAll("#bars g.bar")) {
			const w = g.querySelector("line.wick"), b = g.querySelector("rect.body");
			const y1 = +w.getAttribute("y1"), y2 = +w.getAttribute("y2"), x = +w.getAttribute("x1");
			const top = +b.getAttribute("y"), bottom = top + +b.getAttribute("height");
			if (!(y1 <= y2 && top >= y1 - 0.01 && bottom <= y2 + 1.01)) out.push("bar " + g.dataset.t + ": body outside its wick");
			if (!(x > lastX)) out.push("bar " + g.dataset.t + ": not right of the one before");
			const up = +g.dataset.c >= +g.dataset.o;
			if (g.classList.contains("up") !== up) out.push("bar " + g.dataset.t + ": colour");
			lastX = x;
		}
		return out; })()`
	require.NoError(t, chromedp.Run(ctx,
		network.Enable(), runtime.Enable(), cdplog.Enable(),
		network.SetExtraHTTPHeaders(network.Headers{"Authorization": "Bearer " + token}),
		chromedp.Navigate(p.admin+"/"),
		chromedp.WaitVisible("#archive-streams", chromedp.ByID),
		chromedp.AttributeValue(fmt.Sprintf(`tr.archive-stream[data-feed-id=%q] a.chart`, feed), "href", &href, nil, chromedp.ByQuery),
		chromedp.Click(fmt.Sprintf(`tr.archive-stream[data-feed-id=%q] a.chart`, feed), chromedp.ByQuery),
		chromedp.WaitVisible("#chart", chromedp.ByID), // the chart page, not the status page any more
		drawn("feedID="+feed),
		chromedp.AttributeValue("#chart", "data-state", &state, nil, chromedp.ByID),
	))
	assert.Contains(t, href, "chart?")
	assert.Equal(t, "drawn", state, "the chart opened from the status page")

	// The span filled above, at 1 minute, then at 5 minutes chosen on the
	// page.
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Navigate(fmt.Sprintf("%s/chart?network=testnet&feedID=%s&resolution=1m&span=900&to=%d", p.admin, feed, to)),
		drawn("resolution=1m"),
		chromedp.AttributeValue("#chart", "data-state", &state, nil, chromedp.ByID),
		chromedp.Evaluate(readBars, &rows),
		chromedp.Evaluate(checkGeometry, &geometry),
	))
	require.Equal(t, "drawn", state)
	assert.Equal(t, want1, rows, "the 1-minute bars drawn are the JSON's")
	assert.Empty(t, geometry)
	require.NoError(t, chromedp.Run(ctx,
		chromedp.SetValue("#resolution", "5m", chromedp.ByID),
		chromedp.Evaluate(`document.getElementById("resolution").dispatchEvent(new Event("change"))`, nil),
		drawn("resolution=5m"),
		chromedp.Evaluate(readBars, &rows),
		chromedp.Evaluate(checkGeometry, &geometry),
	))
	assert.Equal(t, want5, rows, "the 5-minute bars drawn are the JSON's")
	assert.Empty(t, geometry)

	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, consoles, "console errors")
	for _, u := range requests {
		assert.True(t, strings.HasPrefix(u, p.admin+"/"), "a request left the admin listener: %s", u)
	}
}
