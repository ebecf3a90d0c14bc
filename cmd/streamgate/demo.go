//go:build !nosimulator

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"streamgate/catalog"
	"streamgate/config"
	"streamgate/server"
	"streamgate/upstreamsim"
)

// demoSetup returns the demo's configuration (config.Default: the embedded
// upstream, demo keys, loopback, and an archive in a Pebble directory of
// its own, demoArchiveDir) and the banner to print once its server has
// started. Builds with the tag nosimulator have no demo (nodemo.go).
func demoSetup() (*config.Config, func(io.Writer, *server.Server), error) {
	cfg := config.Default()
	if dir, err := demoArchiveDir(); err == nil {
		cfg.Archive.Backend, cfg.Archive.Path = config.ArchiveBackendPebble, dir
	}
	return cfg, func(w io.Writer, srv *server.Server) { printDemo(w, srv, cfg) }, nil
}

// demoArchiveDir is the demo's archive: streamgate/demo-archive in the
// user's cache directory ($XDG_CACHE_HOME or ~/.cache on Linux), kept
// across runs, so that what one run fetched the next serves from it (the
// simulator's DON is the same in every run: its reports verify again).
// Without a cache directory the demo runs without an archive.
func demoArchiveDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "streamgate", "demo-archive"), nil
}

// exampleFeed picks a live ETH/USD crypto stream of the simulator's mainnet
// for the demo's example request.
func exampleFeed(sim *upstreamsim.Simulator) string {
	streams := sim.Streams(upstreamsim.Mainnet)
	for _, s := range streams {
		if s.BaseAsset == "ETH" && s.QuoteAsset == "USD" && s.SchemaVersion == "V3" && s.Status == "live" {
			return s.FeedID
		}
	}
	if len(streams) > 0 {
		return streams[0].FeedID
	}
	return ""
}

// printDemo prints the addresses, every demo team's key and requests to
// paste. The keys are those of cfg, the demo configuration: published in
// the source, loopback only, refused by check for any real upstream.
func printDemo(w io.Writer, srv *server.Server, cfg *config.Config) {
	main, test, feed := srv.Addr("mainnet"), srv.Addr("testnet"), ""
	if sim := srv.Simulator(); sim != nil {
		feed = exampleFeed(sim)
	}
	fmt.Fprintf(w, `
streamgate demo: mainnet on http://%s, testnet on http://%s
Status page on http://%s/ (metrics at /metrics).
The upstream is the embedded simulator; nothing leaves this machine.
Every report is verified against the simulator's DON (mode %s): its
signatures, by %d of its %d signers (streams-sim prints that configuration).
`, main, test, srv.Addr("admin"), srv.Gate("mainnet").Mode(), upstreamsim.DONF+1, upstreamsim.DONSigners)
	if cfg.Archive.Backend != config.ArchiveBackendOff {
		fmt.Fprintf(w, `Every verified report fetched is archived in %s: after a restart,
reports at a timestamp, bulk and pages already fetched are served from there
(X-Cache: HIT) with no upstream call.
`, cfg.Archive.Path)
	}
	for _, t := range cfg.Teams {
		fmt.Fprintf(w, "\nTeam %q (%s; %s):\n", t.Name, teamNetworks(t), teamFeeds(t))
		for _, k := range t.Keys {
			for _, s := range k.Secrets() {
				fmt.Fprintf(w, "  export STREAMGATE_KEY=%s\n  export STREAMGATE_SECRET=%s\n", k.ID, s.Reveal())
			}
		}
	}
	fmt.Fprintf(w, `
Try, in another terminal (with the first team's key):
  curl -s 'http://%s/api/v1/discovery?asset_class=Crypto&base_asset=ETH'
  go run ./cmd/streamgate get -url http://%s '/api/v1/reports/latest?feedID=%s'
`, main, main, feed)
	if sim := srv.Simulator(); sim != nil {
		fmt.Fprintf(w, `
A stream of each report schema, its fields decoded and its signatures
verified by: go run ./cmd/streamgate get -decode -url http://%s '/api/v1/reports/latest?feedID=ID'
`, main)
		for _, s := range schemaExamples(sim) {
			fmt.Fprintf(w, "  %-4s %s  %s\n", s.SchemaVersion, s.FeedID, s.Name)
		}
	}
	fmt.Fprintln(w)
}

// schemaExamples returns a live mainnet stream of each schema the
// simulator publishes, in schema order.
func schemaExamples(sim *upstreamsim.Simulator) []catalog.Stream {
	first := map[string]catalog.Stream{}
	for _, s := range sim.Streams(upstreamsim.Mainnet) {
		if _, ok := first[s.SchemaVersion]; !ok && s.Status == "live" {
			first[s.SchemaVersion] = s
		}
	}
	var out []catalog.Stream
	for _, sc := range upstreamsim.Schemas {
		if s, ok := first[sc.String()]; ok {
			out = append(out, s)
		}
	}
	return out
}

func teamNetworks(t config.Team) string {
	if len(t.Networks) == 1 {
		return t.Networks[0] + " only"
	}
	return strings.Join(t.Networks, " and ")
}

func teamFeeds(t config.Team) string {
	if t.AllFeeds() {
		return "every stream"
	}
	return fmt.Sprintf("%d streams", len(t.Feeds))
}
