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
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"streamgate/cache"
	"streamgate/config"
	"streamgate/proxy"
	"streamgate/simulator"
)

// serve runs the gateway until ctx ends (SIGTERM, SIGINT), then drains.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file (default: the embedded demo configuration)")
	if err := fs.Parse(args); err != nil {
		return usageError{code: 2}
	}
	var (
		cfg *config.Config
		err error
	)
	demo := *path == ""
	if demo {
		cfg = config.Default()
	} else if cfg, err = config.Load(*path); err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return usageError{code: 1}
	}
	log, err := newLogger(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer log.Sync()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := proxy.NewMetrics(reg)

	var servers []*http.Server
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
		}
	}

	// The embedded upstream: the simulator, on loopback ports of its own.
	demoFeed := ""
	if emb := embeddedNetworks(cfg); len(emb) > 0 {
		simCfg := simulator.Default()
		sim, err := simulator.New(simCfg)
		if err != nil {
			return fmt.Errorf("starting the embedded upstream: %w", err)
		}
		defer sim.Close()
		demoFeed = exampleFeed(sim)
		for _, name := range emb {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				closeAll()
				return err
			}
			listeners = append(listeners, ln)
			srv := &http.Server{Handler: sim.Handler(simNetwork(name)), ReadHeaderTimeout: 10 * time.Second}
			servers = append(servers, srv)
			go srv.Serve(ln)
			up := &cfg.Networks[name].Upstream
			up.URL = "http://" + ln.Addr().String()
			up.APIKey = simulator.OrgKeyID
			up.APISecret = config.Secret(simulator.OrgKeySecret)
		}
		log.Info("embedded upstream started", zap.Strings("networks", emb))
	}

	store, err := cache.New(cache.Config{
		MaxBytes:     int64(cfg.Cache.MaxBytes),
		Logger:       log.Named("cache"),
		OnFlightDone: func(_ string, waiters int) { metrics.Waiters(waiters) },
	})
	if err != nil {
		closeAll()
		return err
	}
	defer store.Close()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "streamgate_cache_bytes", Help: "Bytes held by the response cache.",
	}, func() float64 { return float64(store.Bytes()) }))

	limits, err := newLimits(ctx, cfg, reg, log)
	if err != nil {
		closeAll()
		return err
	}
	defer limits.Close()

	gw, err := proxy.New(cfg, proxy.Deps{
		Cache:   store,
		Limiter: limits.limiter,
		Quota:   limits.quota,
		Budgets: limits.budgets,
		Logger:  log,
		Metrics: metrics,
	})
	if err != nil {
		closeAll()
		return err
	}

	addrs := make([]string, 0)
	for addr := range gw.Listeners() {
		addrs = append(addrs, addr)
	}
	sort.Strings(addrs)
	bound := map[string]string{} // listen address → actual address
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("listening on %s: %w", addr, err)
		}
		listeners = append(listeners, ln)
		bound[addr] = ln.Addr().String()
		srv := &http.Server{
			Handler:           gw.Listeners()[addr],
			ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
			IdleTimeout:       cfg.Server.IdleTimeout,
			ErrorLog:          zap.NewStdLog(log.Named("http")),
		}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("listener stopped", zap.String("addr", addr), zap.Error(err))
			}
		}()
	}
	var admin *http.Server
	if cfg.Server.AdminListen != "" {
		ln, err := net.Listen("tcp", cfg.Server.AdminListen)
		if err != nil {
			closeAll()
			return fmt.Errorf("admin listener on %s: %w", cfg.Server.AdminListen, err)
		}
		bound["admin"] = ln.Addr().String()
		admin = &http.Server{Handler: adminHandler(reg, gw), ReadHeaderTimeout: 10 * time.Second}
		go admin.Serve(ln)
	}

	// Load every catalog now, so the first requests find it cached and
	// /readyz turns ready as soon as the upstreams answered.
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := gw.Warm(wctx); err != nil {
			log.Warn("catalog warm-up incomplete", zap.Error(err))
		}
	}()

	for _, name := range gw.Networks() {
		nc := cfg.Networks[name]
		log.Info("serving network", zap.String("network", name), zap.String("listen", bound[nc.Listen]), zap.Strings("hosts", nc.Hosts))
	}
	if demo {
		printDemo(stdout, cfg, bound, demoFeed)
	}

	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-reload:
			if demo {
				log.Info("SIGHUP ignored: the demo has no configuration file")
				continue
			}
			next, err := config.Load(*path)
			if err != nil {
				log.Error("reload refused: the new configuration has problems; the old one stays in force", zap.Error(err))
				continue
			}
			if err := gw.Reload(next); err != nil {
				log.Warn("reload", zap.Error(err))
				continue
			}
			log.Info("configuration reloaded", zap.Int("teams", len(next.Teams)))
		}
	}

	log.Info("draining", zap.Duration("timeout", cfg.Server.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var shutdownErr error
	var mu sync.Mutex
	for _, srv := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Shutdown(sctx); err != nil {
				mu.Lock()
				shutdownErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admin != nil {
		admin.Shutdown(sctx)
	}
	if shutdownErr != nil {
		log.Warn("drain incomplete", zap.Error(shutdownErr))
	}
	log.Info("stopped")
	return nil
}

// embeddedNetworks lists the networks whose upstream is the simulator.
func embeddedNetworks(cfg *config.Config) []string {
	var out []string
	for _, name := range cfg.NetworkNames() {
		if cfg.Networks[name].Upstream.Embedded() {
			out = append(out, name)
		}
	}
	return out
}

// simNetwork maps a network name to the simulator's network: testnet for
// names containing "test", else mainnet.
func simNetwork(name string) string {
	if strings.Contains(name, "test") {
		return simulator.Testnet
	}
	return simulator.Mainnet
}

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

func adminHandler(reg *prometheus.Registry, gw *proxy.Gateway) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !gw.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"waiting for every upstream to answer"}`+"\n")
			return
		}
		io.WriteString(w, `{"status":"ready"}`+"\n")
	})
	return mux
}

func newLogger(c config.Log, stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if c.Format == "console" {
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	core := zapcore.NewCore(enc, zapcore.AddSync(stderr), level)
	return zap.New(core, zap.ErrorOutput(zapcore.AddSync(stderr))), nil
}

// printDemo prints the addresses, the demo key and a request to paste.
func printDemo(w io.Writer, cfg *config.Config, bound map[string]string, feed string) {
	main := bound[cfg.Networks["mainnet"].Listen]
	test := bound[cfg.Networks["testnet"].Listen]
	fmt.Fprintf(w, `
streamgate demo: mainnet on http://%s, testnet on http://%s, metrics on http://%s/metrics
The upstream is the embedded simulator; nothing leaves this machine.

Demo key (team "demo", every stream, both networks):
  export STREAMGATE_KEY=%s
  export STREAMGATE_SECRET=%s

Try, in another terminal:
  curl -s 'http://%s/api/v1/discovery?asset_class=Crypto&base_asset=ETH'
  go run ./cmd/streamgate get -url http://%s '/api/v1/reports/latest?feedID=%s'

`, main, test, bound["admin"], config.DemoKeyID, config.DemoKeySecret, main, main, feed)
}
