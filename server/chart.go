// This file holds the admin listener's candle chart: a page per archived
// stream (its bars drawn in the browser by the embedded script, an SVG of
// our own: no library, nothing fetched from another origin) and the bars
// it reads, from the gateway's own history (proxy.Gateway.History: the
// archive's rollups, the bars it lacks filled from the upstream within
// the same bound as /api/v1/history), not through the signed client
// endpoint. The status page lists the archived streams, each linked here.

package server

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"streamgate/candles"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/apierror"
	"streamgate/proxy"
	"streamgate/status"
)

//go:embed chart/chart.html chart/chart.js chart/chart.css
var chartFiles embed.FS

// chartCSP allows the page its own script and style, and reads from its
// own origin only.
const chartCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// chartStreamsTimeout bounds the listing of the archived streams for one
// status sample.
const chartStreamsTimeout = 2 * time.Second

// chartHandler serves GET /chart (the page: ?network=N&feedID=ID, and
// optionally resolution, span and to), its script and style under
// /chart/, and GET /chart/history (the bars as /api/v1/history answers
// them, with ?network=N).
func (s *Server) chartHandler() http.Handler {
	mux := http.NewServeMux()
	asset := func(name, ctype string) http.HandlerFunc {
		body, err := chartFiles.ReadFile("chart/" + name)
		if err != nil {
			panic("server: chart asset " + name + " is not embedded") // a build without it
		}
		sum := sha256.Sum256(body)
		etag := `"` + base64.RawURLEncoding.EncodeToString(sum[:12]) + `"`
		return func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Content-Type", ctype)
			h.Set("Content-Security-Policy", chartCSP)
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("Cache-Control", "no-cache")
			h.Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			_, _ = w.Write(body)
		}
	}
	mux.Handle("GET /chart", asset("chart.html", "text/html; charset=utf-8"))
	mux.Handle("GET /chart/chart.js", asset("chart.js", "text/javascript; charset=utf-8"))
	mux.Handle("GET /chart/chart.css", asset("chart.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /chart/history", s.serveChartHistory)
	return mux
}

// serveChartHistory answers the chart's bars: the parameters of
// /api/v1/history (feedID, resolution, from, to, field, precise) and the
// network's name; the same JSON, and in X-Streamgate-Fill-Pages the
// upstream pages its fill fetched.
func (s *Server) serveChartHistory(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	names := s.cfg.Load().PartitionLabels() // networks, and stream partitions (sharing: credential)
	network := q.Get("network")
	if !slices.Contains(names, network) {
		apierror.Write(w, http.StatusBadRequest, fmt.Sprintf("invalid network %q: one of %s is expected", network, strings.Join(names, ", ")), 0)
		return
	}
	feed, err := feedid.Parse(q.Get("feedID"))
	if err != nil {
		apierror.Write(w, http.StatusBadRequest, "invalid feedID: 0x and 64 hex digits are expected", 0)
		return
	}
	rq, err := candles.ParseRequest(feed, q.Get)
	if err == nil {
		err = rq.CheckSpan(time.Now().Unix())
	}
	if err != nil {
		apierror.Write(w, http.StatusBadRequest, err.Error(), 0)
		return
	}
	res, filled, err := s.gw.History(r.Context(), network, rq, time.Now())
	switch {
	case errors.Is(err, proxy.ErrNoHistory):
		apierror.Write(w, http.StatusServiceUnavailable, "this gateway has no archive open (archive.backend)", 0)
		return
	case err != nil:
		apierror.Write(w, http.StatusServiceUnavailable, "the archive could not be read; try again", 0)
		return
	}
	body := candles.AppendHistory(make([]byte, 0, 64+len(res.Bars)*128), &res, rq.Precise)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Streamgate-Fill-Pages", strconv.Itoa(filled.Pages))
	_, _ = w.Write(body)
}

// archiveStreams lists the streams the archive arch holds on every network
// of cfg, with their catalog names when the gateway gw has the catalog at
// hand, for the status page; nil while the archive is off or not open. A
// network whose list cannot be read is left out (the archive's health says
// why).
func archiveStreams(arch *archiveRun, cfg *config.Config, gw *proxy.Gateway) []status.ArchiveStream {
	if arch == nil {
		return nil
	}
	store := arch.current()
	if store == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), chartStreamsTimeout)
	defer cancel()
	out := []status.ArchiveStream{}
	// Every network, and with sharing: credential each stream partition's
	// label (network@partition): the names the archive keeps under.
	for _, network := range cfg.PartitionLabels() {
		list, err := store.Streams(ctx, network)
		if err != nil {
			continue
		}
		var names map[feedid.ID]string
		if len(list) > 0 {
			name, _ := config.SplitPartitionLabel(network)
			names = gw.StreamNames(name)
		}
		for _, si := range list {
			link := url.Values{"network": {network}, "feedID": {string(si.Stream)}}
			if si.Reports {
				link.Set("to", strconv.FormatUint(uint64(si.Last), 10)) // the chart opens on the newest report held
			}
			out = append(out, status.ArchiveStream{Network: network, FeedID: string(si.Stream), Name: names[si.Stream],
				Reports: si.Reports, First: si.First, Last: si.Last, Spans: si.Spans, Covered: si.Covered,
				Chart: "chart?" + link.Encode()})
		}
	}
	return out
}
