package main

import (
	"fmt"
	"io"

	"streamgate/config"
	"streamgate/server"
	"streamgate/simulator"
)

// exampleFeed picks a live ETH/USD crypto stream of the simulator's mainnet
// for the demo's example request.
func exampleFeed(sim *simulator.Simulator) string {
	streams := sim.Streams(simulator.Mainnet)
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

// printDemo prints the addresses, the demo key and a request to paste.
func printDemo(w io.Writer, srv *server.Server) {
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

Demo key (team "demo", every stream, both networks):
  export STREAMGATE_KEY=%s
  export STREAMGATE_SECRET=%s

Try, in another terminal:
  curl -s 'http://%s/api/v1/discovery?asset_class=Crypto&base_asset=ETH'
  go run ./cmd/streamgate get -url http://%s '/api/v1/reports/latest?feedID=%s'

`, main, test, srv.Addr("admin"), srv.Gate("mainnet").Mode(), simulator.DONF+1, simulator.DONSigners, config.DemoKeyID, config.DemoKeySecret, main, main, feed)
}
