package archive

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func adminServer(t *testing.T, a *Admin) *httptest.Server {
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, method, url string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Trailer, string(b)
}

// TestAdminFillAndExport: a fill asked on the admin endpoint runs to its
// end (its progress listed), and the span it filled is exported.
func TestAdminFillAndExport(t *testing.T) {
	s := openTestPebble(t, t.TempDir())
	defer s.Close()
	const from, to = 1_700_000_000, 1_700_000_000 + 149
	up := &upstreamPages{t: t, network: "testnet", stream: stream(1), seconds: history(from, to+3)}
	f := NewFiller(s, s, up.page, FillerOptions{Now: fillTime})
	stop := runFiller(t, f)
	defer stop()
	srv := adminServer(t, &Admin{Store: s, Filler: f, Networks: []string{"mainnet", "testnet"}, Now: fillTime})

	q := "?network=testnet&feedID=" + string(stream(1)) + "&from=" + strconv.Itoa(from) + "&to=" + time.Unix(to, 0).UTC().Format(time.RFC3339)
	status, _, body := call(t, http.MethodPost, srv.URL+PathFill+q)
	require.Equal(t, http.StatusAccepted, status, body)
	var started struct{ Fill FillProgress }
	require.NoError(t, json.Unmarshal([]byte(body), &started))
	assert.Equal(t, uint32(to), started.Fill.To, "an RFC 3339 time is read")
	require.Eventually(t, func() bool {
		_, _, body := call(t, http.MethodGet, srv.URL+PathFills)
		var got struct{ Fills []FillProgress }
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		return len(got.Fills) == 1 && got.Fills[0].State == FillDone && got.Fills[0].Covered == 150
	}, 30*time.Second, 5*time.Millisecond)

	status, trailer, body := call(t, http.MethodGet, srv.URL+PathExport+q+"&format=csv")
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "150", trailer.Get("X-Archive-Reports"))
	assert.Empty(t, trailer.Get("X-Archive-Error"))
	assert.Len(t, strings.Split(strings.TrimSuffix(body, "\n"), "\n"), 151, "a header and a row per report")
	status, trailer, body = call(t, http.MethodGet, srv.URL+PathExport+q)
	require.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "150", trailer.Get("X-Archive-Reports"))
	assert.Len(t, strings.Split(strings.TrimSuffix(body, "\n"), "\n"), 150, "JSON lines by default")
}

// TestAdminRefuses: every bad parameter is a 400 JSON error naming what
// is wrong, before any fill is stored or any page asked.
func TestAdminRefuses(t *testing.T) {
	s := openTestPebble(t, t.TempDir())
	defer s.Close()
	up := &upstreamPages{t: t, network: "testnet", stream: stream(1)}
	f := NewFiller(s, s, up.page, FillerOptions{Now: fillTime})
	srv := adminServer(t, &Admin{Store: s, Filler: f, Networks: []string{"testnet"}, Retention: 720 * time.Hour, Now: fillTime})
	now := fillTime().Unix()
	id := string(stream(1))
	for _, c := range []struct{ method, q, msg string }{
		{http.MethodPost, "?network=mainnet&feedID=" + id + "&from=1", "network must be one of testnet"},
		{http.MethodPost, "?network=testnet&feedID=0x12&from=1", "feedID"},
		{http.MethodPost, "?network=testnet&feedID=" + id, "missing parameter from"},
		{http.MethodPost, "?network=testnet&feedID=" + id + "&from=yesterday", "unix seconds or an RFC 3339"},
		{http.MethodPost, "?network=testnet&feedID=" + id + "&from=" + strconv.FormatInt(now-100, 10) + "&to=" + strconv.FormatInt(now-200, 10), "is after to"},
		{http.MethodPost, "?network=testnet&feedID=" + id + "&from=" + strconv.FormatInt(now-31*86400, 10), "older than the archive's retention (720h0m0s)"},
		{http.MethodPost, "?network=testnet&feedID=" + id + "&from=" + strconv.FormatInt(now-30, 10), "is after to"},
		{http.MethodGet, "?network=testnet&feedID=" + id + "&from=" + strconv.FormatInt(now-100, 10) + "&format=xml", "format must be jsonl or csv"},
	} {
		path := PathFill
		if c.method == http.MethodGet {
			path = PathExport
		}
		status, _, body := call(t, c.method, srv.URL+path+c.q)
		assert.Equal(t, http.StatusBadRequest, status, c.q)
		var e struct{ Error, Message string }
		require.NoError(t, json.Unmarshal([]byte(body), &e), body)
		assert.Contains(t, e.Message, c.msg, c.q)
	}
	status, _, _ := call(t, http.MethodGet, srv.URL+PathFill+"?network=testnet")
	assert.Equal(t, http.StatusMethodNotAllowed, status)
	stored, err := s.Fills(context.Background())
	require.NoError(t, err)
	assert.Empty(t, stored, "nothing refused was stored")
	assert.Empty(t, up.calls())
}

// TestAdminFillSpanBounded: a fill longer than MaxFillDays is a 400 naming
// the bound, with a retention longer than the bound and with retention 0
// (which keeps everything); a fill of exactly MaxFillDays is queued.
func TestAdminFillSpanBounded(t *testing.T) {
	for _, retention := range []time.Duration{0, 90 * 24 * time.Hour} {
		t.Run(retention.String(), func(t *testing.T) {
			s := openTestPebble(t, t.TempDir())
			defer s.Close()
			up := &upstreamPages{t: t, network: "testnet", stream: stream(1)}
			f := NewFiller(s, s, up.page, FillerOptions{Now: fillTime})
			srv := adminServer(t, &Admin{Store: s, Filler: f, Networks: []string{"testnet"}, Retention: retention, Now: fillTime})
			to := fillTime().Unix() - 3600
			q := func(from int64) string {
				return srv.URL + PathFill + "?network=testnet&feedID=" + string(stream(1)) + "&from=" + strconv.FormatInt(from, 10) + "&to=" + strconv.FormatInt(to, 10)
			}
			froms := []int64{to - MaxFillDays*86400 - 1, to - 60*86400}
			if retention == 0 {
				froms = append(froms, 1) // otherwise older than the retention, which says so
			}
			for _, from := range froms {
				status, _, body := call(t, http.MethodPost, q(from))
				assert.Equal(t, http.StatusBadRequest, status, body)
				var e struct{ Error, Message string }
				require.NoError(t, json.Unmarshal([]byte(body), &e), body)
				assert.Contains(t, e.Message, "a fill spans at most 31 days (to - from <= 2678400 seconds)", from)
			}
			stored, err := s.Fills(context.Background())
			require.NoError(t, err)
			assert.Empty(t, stored, "nothing refused was stored")

			status, _, body := call(t, http.MethodPost, q(to-MaxFillDays*86400))
			assert.Equal(t, http.StatusAccepted, status, body)
			assert.Empty(t, up.calls(), "the runner is not started: no page asked")
		})
	}
}
