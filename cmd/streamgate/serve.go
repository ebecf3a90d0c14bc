package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
	watch := fs.Bool("watch", false, "also reload when the configuration file changes (checked every "+watchInterval.String()+"), as on SIGHUP")
	if err := fs.Parse(args); err != nil {
		return usageError{code: 2}
	}
	demo := *path == ""
	if demo && *watch {
		fmt.Fprintln(stderr, "streamgate: -watch needs -config FILE")
		return usageError{code: 2}
	}

	// SIGHUP is caught from the start: one that arrives while the gateway
	// starts waits for the loop below instead of killing the process.
	reload := make(chan os.Signal, 1)
	signal.Notify(reload, syscall.SIGHUP)
	defer signal.Stop(reload)

	var (
		cfg     *config.Config
		err     error
		fileSum [sha256.Size]byte // of the configuration file last loaded
	)
	if demo {
		cfg = config.Default()
		// The research team reads the simulator's restricted streams only,
		// to show an entitlement at work.
		cfg.Team(config.ResearchTeam).Feeds = simulator.RestrictedStreams()
	} else {
		fileSum, _ = sumFile(*path)
		if cfg, err = config.Load(*path); err != nil {
			fmt.Fprintf(stderr, "%v\n", err)
			return usageError{code: 1}
		}
	}
	fixed := restartSettings(cfg)
	log, access, stopAccess, err := newLoggers(cfg.Log, stderr)
	if err != nil {
		return err
	}
	defer stopAccess()
	defer log.Sync()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := proxy.NewMetrics(reg)

	var upstreamServers, servers []*http.Server
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
			srv := &http.Server{Handler: sim.Handler(simulator.NetworkFor(name)), ReadHeaderTimeout: 10 * time.Second}
			upstreamServers = append(upstreamServers, srv)
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

	var draining atomic.Bool // set when SIGTERM arrives: /readyz answers 503
	gw, err := proxy.New(cfg, proxy.Deps{
		Cache:       store,
		Limiter:     limits.limiter,
		Quota:       limits.quota,
		Budgets:     limits.budgets,
		ReplayStore: limits.replayStore(),
		Logger:      log,
		AccessLog:   access,
		Metrics:     metrics,
	})
	if err != nil {
		closeAll()
		return err
	}

	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "streamgate_ready", Help: "1 while /readyz answers 200: every upstream has answered and the process is not draining.",
	}, func() float64 {
		if gw.Ready() && !draining.Load() {
			return 1
		}
		return 0
	}))

	bound := map[string]string{} // network name, or "admin" → the address bound
	for _, b := range gw.Listeners() {
		ln, err := net.Listen("tcp", b.Addr)
		if err != nil {
			closeAll()
			return fmt.Errorf("listening on %s: %w", b.Addr, err)
		}
		listeners = append(listeners, ln)
		for _, name := range b.Networks {
			bound[name] = ln.Addr().String()
		}
		srv := proxy.NewServer(b.Handler, cfg.Server, zap.NewStdLog(log.Named("http")))
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("listener stopped", zap.String("addr", b.Addr), zap.Error(err))
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
		admin = proxy.NewServer(adminHandler(reg, gw, &draining), cfg.Server, zap.NewStdLog(log.Named("http")))
		go admin.Serve(ln)
		log.Info("admin listening", zap.String("addr", bound["admin"]))
	}

	// Load every catalog now, so the first requests find it cached and
	// /readyz turns ready as soon as the upstreams answered; an upstream
	// that cannot be reached is tried again, with backoff, until it can.
	go gw.Warm(ctx)

	for _, name := range gw.Networks() {
		log.Info("serving network", zap.String("network", name), zap.String("listen", bound[name]), zap.Strings("hosts", cfg.Networks[name].Hosts))
	}
	if demo {
		printDemo(stdout, bound, demoFeed)
	}

	// reloadConfig applies the configuration file again; a configuration
	// with problems is refused and the one in force stays.
	reloadConfig := func(trigger string) {
		if sum, err := sumFile(*path); err == nil {
			fileSum = sum
		}
		next, err := config.Load(*path)
		if err != nil {
			log.Error("reload refused: the new configuration has problems; the old one stays in force",
				zap.String("trigger", trigger), zap.Error(err))
			return
		}
		if err := gw.Reload(next); err != nil {
			log.Warn("reload incomplete", zap.String("trigger", trigger), zap.Error(err))
			return
		}
		if changed := changedSettings(fixed, restartSettings(next)); len(changed) > 0 {
			log.Warn("reload: these settings only change with a restart; the running values stay in force",
				zap.Strings("settings", changed))
		}
		log.Info("configuration reloaded", zap.String("trigger", trigger), zap.Int("teams", len(next.Teams)))
	}
	var watchTick <-chan time.Time
	if *watch {
		t := time.NewTicker(watchInterval)
		defer t.Stop()
		watchTick = t.C
		log.Info("watching the configuration file", zap.String("path", *path), zap.Duration("interval", watchInterval))
	}
	watchFailing := false
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-reload:
			if demo {
				log.Info("SIGHUP ignored: the demo has no configuration file")
				continue
			}
			reloadConfig("SIGHUP")
		case <-watchTick:
			sum, err := sumFile(*path)
			if err != nil {
				if !watchFailing {
					log.Warn("config watch: cannot read the configuration file; the one in force stays", zap.Error(err))
				}
				watchFailing = true
				continue
			}
			watchFailing = false
			if sum != fileSum {
				reloadConfig("watch")
			}
		}
	}

	// Drain: stop accepting and finish the requests in flight, then stop the
	// embedded upstream they may still be calling, then the admin listener,
	// which answers /readyz with 503 meanwhile.
	draining.Store(true)
	log.Info("draining", zap.Duration("timeout", cfg.Server.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Server.ShutdownTimeout)
	defer cancel()
	err = shutdown(sctx, servers)
	if err != nil {
		log.Warn("drain incomplete: closing the connections still open", zap.Error(err))
		for _, srv := range servers {
			srv.Close()
		}
	}
	if err := shutdown(sctx, upstreamServers); err != nil {
		for _, srv := range upstreamServers {
			srv.Close()
		}
	}
	if admin != nil {
		if err := admin.Shutdown(sctx); err != nil {
			admin.Close()
		}
	}
	log.Info("stopped")
	return nil
}

// watchInterval is how often -watch looks at the configuration file.
const watchInterval = 2 * time.Second

// sumFile returns the SHA-256 of the file's contents.
func sumFile(path string) ([sha256.Size]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return [sha256.Size]byte{}, err
	}
	return sha256.Sum256(data), nil
}

// shutdown shuts the servers down together and returns the first error.
func shutdown(ctx context.Context, servers []*http.Server) error {
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() { errs[i] = srv.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// restartSettings returns the settings that a reload does not change, by
// their YAML path. Secrets are represented by a digest, and only the paths
// are ever logged.
func restartSettings(cfg *config.Config) map[string]string {
	digest := func(s config.Secret) string {
		sum := sha256.Sum256([]byte(s.Reveal()))
		return hex.EncodeToString(sum[:])
	}
	m := map[string]string{
		"server.admin_listen":        cfg.Server.AdminListen,
		"server.shutdown_timeout":    cfg.Server.ShutdownTimeout.String(),
		"server.read_header_timeout": cfg.Server.ReadHeaderTimeout.String(),
		"server.idle_timeout":        cfg.Server.IdleTimeout.String(),
		"server.read_timeout":        cfg.Server.ReadTimeout.String(),
		"server.write_timeout":       cfg.Server.WriteTimeout.String(),
		"log.level":                  string(cfg.Log.Level),
		"log.format":                 string(cfg.Log.Format),
		"cache.max_bytes":            strconv.FormatInt(int64(cfg.Cache.MaxBytes), 10),
		"ratelimit.backend":          string(cfg.RateLimit.Backend),
		"ratelimit.redis.url":        cfg.RateLimit.Redis.URL,
		"ratelimit.redis.password":   digest(cfg.RateLimit.Redis.Password),
		"ratelimit.redis.fail_mode":  string(cfg.RateLimit.Redis.FailMode),
	}
	for name, n := range cfg.Networks {
		p := "networks." + name
		up := n.Upstream
		m[p] = "configured"
		m[p+".listen"] = n.Listen
		m[p+".hosts"] = strings.Join(n.Hosts, ",")
		m[p+".pass_through"] = strings.Join(n.PassThrough, ",")
		m[p+".upstream.url"] = up.URL
		m[p+".upstream.api_key"] = up.APIKey
		m[p+".upstream.api_secret"] = digest(up.Secret())
		m[p+".upstream.timeout"] = up.Timeout.String()
		m[p+".upstream.retries"] = strconv.Itoa(up.Retries)
		m[p+".upstream.budget"] = fmt.Sprint(up.Budget.RPS, "/", up.Budget.Burst)
		m[p+".upstream.max_bulk"] = strconv.Itoa(up.MaxBulk)
	}
	return m
}

// changedSettings lists the paths whose values differ, sorted.
func changedSettings(running, next map[string]string) []string {
	var out []string
	for k, v := range running {
		if w, ok := next[k]; !ok || w != v {
			out = append(out, k)
		}
	}
	for k := range next {
		if _, ok := running[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
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

// adminHandler serves /metrics, /healthz (the process is alive) and /readyz
// (every upstream has answered, and the process is not draining).
func adminHandler(reg *prometheus.Registry, gw *proxy.Gateway, draining *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if draining.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"draining"}`+"\n")
			return
		}
		if !gw.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"status":"waiting for every upstream to answer"}`+"\n")
			return
		}
		io.WriteString(w, `{"status":"ready"}`+"\n")
	})
	return mux
}

// newLoggers returns the process logger and the access logger. Both write
// to stderr; the access log, one line per request, goes through a buffer
// flushed every second (and at exit), which halves what a line costs a
// request (about 2 us less per line written to a pipe, measured with zap's
// JSON encoder). A crash can lose the last second of access lines; errors,
// warnings and the audit trail are written at once.
// The returned stop flushes the access log and ends its flusher.
func newLoggers(c config.Log, stderr io.Writer) (log, access *zap.Logger, stop func(), err error) {
	level, err := zapcore.ParseLevel(string(c.Level))
	if err != nil {
		return nil, nil, nil, err
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if c.Format == "console" {
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	out := zapcore.Lock(zapcore.AddSync(stderr))
	log = zap.New(zapcore.NewCore(enc, out, level), zap.ErrorOutput(out))
	buffered := &zapcore.BufferedWriteSyncer{WS: out, Size: 256 << 10, FlushInterval: time.Second}
	access = zap.New(zapcore.NewCore(enc.Clone(), buffered, level), zap.ErrorOutput(out))
	return log, access, func() { buffered.Stop() }, nil
}

// printDemo prints the addresses, the demo key and a request to paste.
func printDemo(w io.Writer, bound map[string]string, feed string) {
	main, test := bound["mainnet"], bound["testnet"]
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
