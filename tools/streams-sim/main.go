// Command streams-sim serves the simulated Data Streams API: mainnet and
// testnet on their own loopback ports, each with its REST endpoints and its
// WebSocket stream (/api/v1/ws, plain ws://), and the control API (faults,
// WebSocket drops and counters) on a third.
//
//	go run ./tools/streams-sim                      # 127.0.0.1:9181, :9182, control :9189
//	go run ./tools/streams-sim -mainnet 127.0.0.1:0 # pick a free port
//	go run ./tools/streams-sim -error-rate 0.1 -latency 50ms
//	go run ./tools/streams-sim -ha-origins 001,002  # HEAD / advertises two HA origins
//	go run ./tools/streams-sim -rate-mode calendar  # 10 requests per calendar second (default: a burst-1 bucket)
//
// It stops cleanly on SIGINT or SIGTERM, closing WebSocket connections with
// status 1001.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"streamgate/auth"
	"streamgate/upstreamsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "streams-sim:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts the servers down.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("streams-sim", flag.ContinueOnError)
	mainnetAddr := fs.String("mainnet", "127.0.0.1:9181", "listen address of the mainnet API (port 0 picks a free one)")
	testnetAddr := fs.String("testnet", "127.0.0.1:9182", "listen address of the testnet API")
	controlAddr := fs.String("control", "127.0.0.1:9189", "listen address of the control API (faults, counters)")
	history := fs.Duration("history", 24*time.Hour, "how far back reports exist")
	skew := fs.Duration("max-skew", 5*time.Second, "largest clock difference allowed in X-Authorization-Timestamp")
	rps := fs.Float64("rate", 10, "requests per second allowed per key and endpoint (0 disables)")
	rateMode := fs.String("rate-mode", "bucket", "how the rate limit counts: bucket (a token bucket of -rate and -burst; with burst 1 the strictest), calendar (per calendar second), sliding (in any one second)")
	burst := fs.Int("burst", 1, "burst of the rate limit in bucket mode")
	maxBulk := fs.Int("max-bulk", 0, "most stream IDs in one bulk request (0: no cap)")
	haOrigins := fs.String("ha-origins", "", "comma-separated HA origins advertised by HEAD / and chosen with X-Cll-Origin, e.g. 001,002 (empty: no HA)")
	wsMaxConns := fs.Int("ws-max-conns", upstreamsim.DefaultWSMaxConnsPerKey, "concurrent WebSocket connections allowed per key and network (negative: no cap)")
	wsPing := fs.Duration("ws-ping", 15*time.Second, "interval of the simulator's pings to WebSocket clients (negative: none)")
	var f upstreamsim.Faults
	fs.DurationVar(&f.Latency, "latency", 0, "latency added to every API request")
	fs.DurationVar(&f.Jitter, "jitter", 0, "random extra latency, uniform in [0, jitter)")
	fs.Float64Var(&f.ErrorRate, "error-rate", 0, "share of API requests answered 500, 502 or 503")
	fs.Float64Var(&f.Hang, "hang", 0, "share of API requests that hang until the client gives up")
	fs.Float64Var(&f.Force429, "force-429", 0, "share of API requests answered 429")
	fs.IntVar(&f.WSRefuse, "ws-refuse", 0, "answer every WebSocket upgrade with this status (0: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	cfg := upstreamsim.Default()
	cfg.History, cfg.MaxSkew, cfg.MaxBulkFeeds, cfg.Faults = *history, *skew, *maxBulk, f
	cfg.RateLimit, cfg.Burst = rate.Limit(*rps), *burst
	mode, err := upstreamsim.ParseRateMode(*rateMode)
	if err != nil {
		return err
	}
	cfg.RateMode = mode
	if *haOrigins != "" {
		cfg.HAOrigins = strings.Split(*haOrigins, ",")
	}
	cfg.WSMaxConnsPerKey, cfg.WSPingInterval = *wsMaxConns, *wsPing
	if *wsMaxConns == 0 {
		cfg.WSMaxConnsPerKey = -1 // the flag's 0 would mean the default
	}
	sim, err := upstreamsim.New(cfg)
	if err != nil {
		return err
	}
	defer sim.Close()

	handlers := []struct {
		name, addr string
		h          http.Handler
	}{
		{upstreamsim.Mainnet, *mainnetAddr, sim.Handler(upstreamsim.Mainnet)},
		{upstreamsim.Testnet, *testnetAddr, sim.Handler(upstreamsim.Testnet)},
		{"control", *controlAddr, sim.ControlHandler()},
	}
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for _, h := range handlers {
		l, err := net.Listen("tcp", h.addr)
		if err != nil {
			return fmt.Errorf("listen for %s: %w", h.name, err)
		}
		listeners = append(listeners, l)
	}

	urls := make([]string, len(listeners))
	for i, l := range listeners {
		urls[i] = "http://" + l.Addr().String()
	}
	printBanner(out, sim, cfg, urls[0], urls[1], urls[2])

	servers := make([]*http.Server, len(handlers))
	errc := make(chan error, len(handlers))
	for i, h := range handlers {
		servers[i] = &http.Server{Handler: h.h, ReadHeaderTimeout: 10 * time.Second}
		// The rate limit counts a request when it reached this host, not
		// when a busy machine let the handler run.
		l := upstreamsim.CountArrivals(servers[i], listeners[i])
		go func(srv *http.Server, l net.Listener) {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}(servers[i], l)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sim.Close() // release hanging requests so that shutdown can finish
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shutCtx); err != nil && serveErr == nil {
			serveErr = fmt.Errorf("shutdown: %w", err)
		}
	}
	fmt.Fprintln(out, "streams-sim: stopped")
	return serveErr
}

func printBanner(out io.Writer, sim *upstreamsim.Simulator, cfg upstreamsim.Config, mainnet, testnet, control string) {
	feed := upstreamsim.RestrictedStreams()[1]
	ha := "off"
	if len(cfg.HAOrigins) > 0 {
		ha = "origins " + strings.Join(cfg.HAOrigins, ",")
	}
	wsLimit := "no cap"
	if cfg.WSMaxConnsPerKey > 0 {
		wsLimit = fmt.Sprintf("%d per key and network", cfg.WSMaxConnsPerKey)
	}
	fmt.Fprintf(out, `streams-sim: simulated Data Streams API
  mainnet  %s   (WebSocket: ws://%s/api/v1/ws?feedIDs=...)
  testnet  %s   (WebSocket: ws://%s/api/v1/ws?feedIDs=...)
  control  %s   (GET/PUT /faults, POST /faults/ws-drop, POST /faults/outage, GET /counters, POST /counters/reset, GET /refusals, GET /streams)
  websocket connections: %s; HA: %s

keys:
  organisation (every stream, hidden ones too)
    id      %s
    secret  %s
  restricted (five streams, no hidden one)
    id      %s
    secret  %s

try:
  curl -s '%s/api/v1/discovery?asset_class=crypto'
  KEY=%s SECRET=%s
  P='/api/v1/reports/latest?feedID=%s'
  TS=$(date +%%s%%3N)
  SIG=$(printf '%%s' "GET $P %s $KEY $TS" | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
  curl -s -H "Authorization: $KEY" -H "X-Authorization-Timestamp: $TS" -H "X-Authorization-Signature-SHA256: $SIG" "%s$P"
  curl -s -X PUT -d '{"errorRate":0.2,"latency":"50ms"}' %s/faults
  curl -s -X POST -d '{"abrupt":false}' %s/faults/ws-drop
`, mainnet, strings.TrimPrefix(mainnet, "http://"), testnet, strings.TrimPrefix(testnet, "http://"), control, wsLimit, ha,
		upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, upstreamsim.RestrictedKeyID, upstreamsim.RestrictedKeySecret,
		mainnet, upstreamsim.OrgKeyID, upstreamsim.OrgKeySecret, feed, auth.EmptyBodyHash, mainnet, control, control)
	fmt.Fprintf(out, "\nEvery report is signed by %d of the %d signers of the simulated DON (f = %d).\n"+
		"A gateway in front of it trusts this DON configuration (also GET %s/don):\n\n%s",
		upstreamsim.DONF+1, upstreamsim.DONSigners, upstreamsim.DONF, control, sim.DONYAML())
	fmt.Fprintf(out, "\n%d mainnet and %d testnet streams; Ctrl-C stops.\n",
		len(sim.Streams(upstreamsim.Mainnet)), len(sim.Streams(upstreamsim.Testnet)))
}
