package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/balancer"
	"streamgate/server"
	"streamgate/simulator"
)

// continuityFeedsPerClient is how many streams each continuity client
// subscribes to.
const continuityFeedsPerClient = 3

// scenarioContinuity: N WebSocket clients (a tenth of them in HA mode:
// one connection per origin the gateway advertises, deduplicated as the
// SDKs do) over three replicas sharing one Redis, behind a readiness-aware
// balancer; every client reconnects one second after a close. The
// replicas are restarted one after the other (each drained as SIGTERM
// drains it, then a new one started and ready), then the upstream has an
// outage of 8 s (REST and WebSocket refused, connections dropped). Counted
// per client and stream from its first report to the newest second at the
// end: missing (stream, second) pairs, pairs received twice (plain), the
// time from each reconnect to live (the newest second any client had when
// it connected, on every stream), and the history kept in Redis per
// stream. Each client has a key of its own. The same run with resume and backfill off
// (realtime.resume_window and backfill_max 0s) is the baseline.
func scenarioContinuity(ctx context.Context, o *options) error {
	if !o.set["c"] {
		o.conc = 1000
	}
	if !o.set["streams"] {
		o.streams = 10
	}
	if o.streams < continuityFeedsPerClient {
		return fmt.Errorf("-streams must be at least %d", continuityFeedsPerClient)
	}
	if o.dur < 3*time.Second || o.dur > 2*time.Minute {
		return errors.New("continuity: -d (the steady time between the events) between 3s and 2m")
	}
	redisURL, admin, stop, err := benchRedis(ctx, o)
	if err != nil {
		return err
	}
	defer stop()

	sim, err := simulator.New(simulator.Default()) // 10 requests per second per key and endpoint
	if err != nil {
		return err
	}
	defer sim.Close()
	up := &stack{}
	defer up.Close()
	upstream, err := up.listen(sim.Handler(simulator.Mainnet), 10*time.Second, 0)
	if err != nil {
		return err
	}
	feeds, err := publishingStreams(sim, mainnet, o.streams, false)
	if err != nil {
		return err
	}
	fmt.Fprintf(o.out, "continuity: %d WebSocket clients (%d in HA mode), each of %d of %d publishing mainnet streams, over 3 replicas "+
		"sharing one Redis behind a readiness-aware balancer; clients reconnect 1 s after a close; %v steady between a rolling restart "+
		"of every replica and an upstream outage of 8 s\n", o.conc, o.conc/10, continuityFeedsPerClient, len(feeds), o.dur)
	var runs []*contRun
	for _, side := range []struct {
		name       string
		continuity bool
	}{{"streamgate", true}, {"streamgate, resume and backfill off (baseline)", false}} {
		if err := admin.FlushAll(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		r, err := runContinuity(ctx, o, sim, upstream, redisURL, admin, feeds, side.continuity)
		if err != nil {
			return fmt.Errorf("%s: %w", side.name, err)
		}
		r.print(o, side.name)
		runs = append(runs, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	a, b := runs[0], runs[1]
	fmt.Fprintf(o.out, "against the baseline: missing pairs %d vs %d (plain), %d vs %d (HA); heap %+.1f MiB (%+.0f KiB per stream and replica, the history and what else resume and backfill hold)\n",
		a.missing, b.missing, a.haMissing, b.haMissing, (float64(a.heapInUse)-float64(b.heapInUse))/(1<<20),
		(float64(a.heapInUse)-float64(b.heapInUse))/1024/float64(3*len(feeds)))
	return nil
}

// contReplica is one in-process replica and its readiness endpoint.
type contReplica struct {
	srv   *server.Server
	ready *http.Server
	addr  string
}

func startContReplica(redisURL, upstream string, keys []key, conns int, continuity bool) (*contReplica, string, error) {
	cfg := config.Default()
	cfg.Server.AdminListen = ""
	cfg.RateLimit.Backend, cfg.RateLimit.Redis.URL = config.BackendRedis, redisURL
	cfg.Auth.AnonymousRate = config.Rate{}
	cfg.Realtime.TeamConnections = conns
	if !continuity {
		cfg.Realtime.ResumeWindow, cfg.Realtime.BackfillMax = 0, 0
	}
	for name, nc := range cfg.Networks {
		if name != mainnet {
			delete(cfg.Networks, name)
			continue
		}
		nc.Listen = "127.0.0.1:0"
		nc.Upstream.URL = upstream
		nc.Upstream.WSURL = "ws" + strings.TrimPrefix(upstream, "http")
		nc.Upstream.APIKey = simulator.OrgKeyID
		nc.Upstream.APISecret = config.Secret(simulator.OrgKeySecret)
		nc.Upstream.Budget = config.Rate{RPS: 8, Burst: 8} // under the simulator's 10/s, all replicas together
	}
	for i := range cfg.Teams {
		if cfg.Teams[i].Name != config.DemoTeam {
			continue
		}
		cfg.Teams[i].Networks = []string{mainnet}
		cfg.Teams[i].Rate = config.Rate{}
		for _, k := range keys {
			cfg.Teams[i].Keys = append(cfg.Teams[i].Keys, config.Key{ID: k.ID, Secret: config.Secret(k.Secret)})
		}
	}
	cfg.Teams = slices.DeleteFunc(cfg.Teams, func(t config.Team) bool { return t.Name != config.DemoTeam })
	if err := cfg.Validate(); err != nil {
		return nil, "", fmt.Errorf("replica configuration: %w", err)
	}
	srv, err := server.New(cfg, server.Options{})
	if err != nil {
		return nil, "", err
	}
	srv.Start()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		srv.Close()
		return nil, "", err
	}
	r := &contReplica{srv: srv, addr: srv.Addr(mainnet), ready: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if srv.Ready() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})}}
	go r.ready.Serve(ln)
	return r, "http://" + ln.Addr().String() + "/readyz", nil
}

func (r *contReplica) close() {
	r.srv.Close()
	r.ready.Close()
}

// contClient is one streaming application.
type contClient struct {
	ha    bool
	feeds []int
	index map[string]int

	mu       sync.Mutex
	got      map[int][]int64 // per stream, the seconds kept in arrival order
	highest  map[int]int64
	repeated int // plain: a second received again
	reconns  int
	origins  int
	failures int
	lastErr  string
}

// contRun is one side's figures.
type contRun struct {
	clients, ha                    int
	missing, repeated, disordered  int64
	haMissing                      int64
	pairs                          int64
	reconnects, failures, unsettle int64
	toLive                         histogram
	liveTimeouts                   int64
	historyKeys                    int
	historyBytes, historyEntries   int64
	heapInUse                      uint64  // this process (replicas, clients, simulator) after the count, after a collection
	frameBytes                     float64 // mean frame of the streams, as the upstream sends it
	historySeconds                 int64   // realtime.resume_window: the seconds of history each replica keeps per stream
	restart, outage                time.Duration
	lastErr                        string
}

func runContinuity(ctx context.Context, o *options, sim *simulator.Simulator, upstream, redisURL string, admin *redis.Client, feeds []string, continuity bool) (*contRun, error) {
	// Each client has a key of its own, as separate applications do (a
	// returning client is known by its key and its streams).
	keys := make([]key, o.conc)
	for i := range keys {
		id, secret := benchKey("c", i)
		keys[i] = key{ID: id, Secret: []byte(secret)}
	}
	bal, err := balancer.Listen("127.0.0.1:0", balancer.Options{Interval: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	defer bal.Close()
	conns := 2*o.conc + 50
	reps := make([]*contReplica, 3)
	defer func() {
		for _, r := range reps {
			if r != nil {
				r.close()
			}
		}
	}()
	startOne := func(i int) error {
		r, readyURL, err := startContReplica(redisURL, upstream, keys, conns, continuity)
		if err != nil {
			return err
		}
		reps[i] = r
		bal.Add(balancer.Backend{Addr: r.addr, Ready: readyURL})
		for deadline := time.Now().Add(60 * time.Second); !slices.Contains(bal.Ready(), r.addr); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("a replica was not ready within 60s")
			}
		}
		return nil
	}
	for i := range reps {
		if err := startOne(i); err != nil {
			return nil, err
		}
	}
	index := map[string]int{}
	for i, f := range feeds {
		index[f] = i
	}
	// live is, per stream, the newest second any client has.
	live := make([]atomic.Int64, len(feeds))
	st := newStamps()
	base := "http://" + bal.Addr()
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	run := &contRun{clients: o.conc}
	var toLiveMu sync.Mutex
	clients := make([]*contClient, o.conc)
	for i := range clients {
		c := &contClient{ha: i%10 == 9, index: index, got: map[int][]int64{}, highest: map[int]int64{}}
		for j := range continuityFeedsPerClient {
			c.feeds = append(c.feeds, (i+j*7)%len(feeds))
		}
		slices.Sort(c.feeds)
		c.feeds = slices.Compact(c.feeds)
		clients[i] = c
		if c.ha {
			run.ha++
		}
		names := make([]string, len(c.feeds))
		for j, f := range c.feeds {
			names[j] = feeds[f]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			origins := []string{""}
			if c.ha {
				origins = discoverOrigins(cctx, base, keys[i], st, i)
			}
			c.mu.Lock()
			c.origins = len(origins)
			c.mu.Unlock()
			var owg sync.WaitGroup
			for _, origin := range origins {
				owg.Add(1)
				go func() {
					defer owg.Done()
					first := true
					for cctx.Err() == nil {
						ws, err := dialOrigin(cctx, base, keys[i], st, i, names, origin)
						if err != nil {
							c.mu.Lock()
							c.failures++
							c.lastErr = err.Error()
							c.mu.Unlock()
						} else {
							at := time.Now()
							want := make(map[int]int64, len(c.feeds))
							for _, f := range c.feeds {
								want[f] = live[f].Load()
							}
							if !first {
								c.mu.Lock()
								c.reconns++
								c.mu.Unlock()
							}
							measured := first // the first connection is not a reconnect
							first = false
							err := readFrames(cctx, ws, func(feed []byte, ts, _ int64) {
								f, ok := index[string(feed)]
								if !ok {
									return
								}
								c.keep(f, ts)
								for cur := live[f].Load(); ts > cur && !live[f].CompareAndSwap(cur, ts); cur = live[f].Load() {
								}
								if measured {
									return
								}
								c.mu.Lock()
								done := true
								for g, w := range want {
									done = done && c.highest[g] >= w
								}
								c.mu.Unlock()
								if done {
									measured = true
									toLiveMu.Lock()
									run.toLive.record(time.Since(at))
									toLiveMu.Unlock()
								}
							})
							ws.CloseNow()
							if !measured && cctx.Err() == nil {
								c.mu.Lock()
								c.lastErr = fmt.Sprint(err)
								c.mu.Unlock()
							}
						}
						select {
						case <-cctx.Done():
						case <-time.After(time.Second):
						}
					}
				}()
			}
			owg.Wait()
		}()
		if i%50 == 49 {
			time.Sleep(50 * time.Millisecond) // connect in waves
		}
	}
	// Every client live on every stream, then the steady time.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		n := 0
		for _, c := range clients {
			c.mu.Lock()
			if len(c.highest) == len(c.feeds) {
				n++
			}
			c.mu.Unlock()
		}
		if n == len(clients) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d clients received every stream within 2m", n, len(clients))
		}
	}
	sleep := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	sleep(o.dur)
	began := time.Now()
	for i := range reps {
		old := reps[i]
		sctx, scancel := context.WithTimeout(ctx, time.Minute)
		old.srv.Shutdown(sctx) // what SIGTERM does: drain, then stop
		scancel()
		old.ready.Close()
		bal.Remove(old.addr)
		reps[i] = nil
		if err := startOne(i); err != nil {
			return nil, err
		}
	}
	run.restart = time.Since(began)
	sleep(o.dur)
	began = time.Now()
	sim.Outage(8 * time.Second)
	sleep(8 * time.Second)
	run.outage = time.Since(began)
	sleep(o.dur)

	// The end of the count: per stream, the newest second any client has;
	// wait (at most a minute) until every client has it.
	hi := make([]int64, len(feeds))
	for f := range hi {
		hi[f] = live[f].Load()
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		behind := 0
		for _, c := range clients {
			c.mu.Lock()
			for _, f := range c.feeds {
				if c.highest[f] < hi[f] {
					behind++
				}
			}
			c.mu.Unlock()
		}
		if run.unsettle = int64(behind); behind == 0 {
			break
		}
	}
	// The process's heap while everything is still up, after a collection:
	// compared with the baseline's (no history), it is the history's cost.
	run.heapInUse, _ = heap()
	for _, f := range feeds {
		rep, ok := sim.Report(simulator.Mainnet, f, hi[slices.Index(feeds, f)])
		if !ok {
			return nil, fmt.Errorf("the simulator has no report of %s", f)
		}
		b, err := json.Marshal(struct {
			Report simulator.Report `json:"report"`
		}{rep})
		if err != nil {
			return nil, err
		}
		run.frameBytes += float64(len(b)) / float64(len(feeds))
	}
	if continuity {
		run.historySeconds = int64(config.Default().Realtime.ResumeWindow / time.Second)
	}
	// The history in Redis, if any: every key of type stream.
	var cursor uint64
	for {
		keys, next, err := admin.ScanType(ctx, cursor, "*", 1000, "stream").Result()
		if err != nil {
			return nil, fmt.Errorf("redis scan: %w", err)
		}
		for _, key := range keys {
			run.historyKeys++
			if n, err := admin.MemoryUsage(ctx, key).Result(); err == nil {
				run.historyBytes += n
			}
			if n, err := admin.XLen(ctx, key).Result(); err == nil {
				run.historyEntries += n
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	cancel()
	wg.Wait()
	for _, c := range clients {
		c.mu.Lock()
		run.reconnects += int64(c.reconns)
		run.failures += int64(c.failures)
		if c.lastErr != "" {
			run.lastErr = c.lastErr
		}
		run.repeated += int64(c.repeated)
		for _, f := range c.feeds {
			got := c.got[f]
			if len(got) == 0 {
				continue
			}
			seen := make(map[int64]bool, len(got))
			var top int64
			for _, ts := range got {
				if !seen[ts] && ts < top {
					run.disordered++
				}
				seen[ts] = true
				top = max(top, ts)
			}
			for ts := got[0]; ts <= hi[f]; ts++ {
				run.pairs++
				if !seen[ts] {
					if c.ha {
						run.haMissing++
					} else {
						run.missing++
					}
				}
			}
		}
		c.mu.Unlock()
	}
	return run, nil
}

// keep records a report: a plain client keeps every one (a second
// received again is counted), an HA client only one newer than the newest
// it has, as the SDKs deduplicate.
func (c *contClient) keep(f int, ts int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ha && ts <= c.highest[f] {
		return
	}
	if !c.ha && slices.Contains(c.got[f], ts) {
		c.repeated++
	}
	c.highest[f] = max(c.highest[f], ts)
	c.got[f] = append(c.got[f], ts)
}

// discoverOrigins asks HEAD / for the origins, as the SDKs do in HA mode;
// none (or no answer within a few tries) means one connection.
func discoverOrigins(ctx context.Context, base string, k key, st *stamps, keyIndex int) []string {
	for range 5 {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, base+"/", nil)
		if err != nil {
			break
		}
		auth.Sign(req, k.ID, k.Secret, time.UnixMilli(st.next(keyIndex, "HEAD /", time.Now())))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if v := strings.Trim(resp.Header.Get(simulator.OriginsHeader), "{}"); v != "" {
					return strings.Split(v, ",")
				}
				break
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	return []string{""}
}

// dialOrigin dials the stream of feeds at base, signed with k, naming
// origin in X-Cll-Origin when it is set (dialWS: none).
func dialOrigin(ctx context.Context, base string, k key, st *stamps, keyIndex int, feeds []string, origin string) (*websocket.Conn, error) {
	target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, ",")
	req, err := http.NewRequest(http.MethodGet, base+target, nil)
	if err != nil {
		return nil, err
	}
	auth.Sign(req, k.ID, k.Secret, time.UnixMilli(st.next(keyIndex, target, time.Now())))
	if origin != "" {
		req.Header.Set(simulator.OriginHeader, origin)
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(base, "http")+target, &websocket.DialOptions{
		HTTPHeader: req.Header, CompressionMode: websocket.CompressionDisabled,
	})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("upgrade: status %d: %w", resp.StatusCode, err)
		}
		return nil, err
	}
	c.SetReadLimit(64 << 10)
	return c, nil
}

func (r *contRun) print(o *options, name string) {
	fmt.Fprintf(o.out, "%s:\n", name)
	fmt.Fprintf(o.out, "  rolling restart of 3 replicas: %v; upstream outage: %v\n", r.restart.Round(time.Millisecond), r.outage.Round(time.Millisecond))
	fmt.Fprintf(o.out, "  (stream, second) pairs counted: %d over %d clients (%d HA)\n", r.pairs, r.clients, r.ha)
	fmt.Fprintf(o.out, "  missing pairs: plain %d, HA %d (goal 0); repeated pairs (plain): %d (goal 0); out of order: %d\n",
		r.missing, r.haMissing, r.repeated, r.disordered)
	fmt.Fprintf(o.out, "  reconnects: %d; failed connects: %d; client streams still behind at the end: %d\n", r.reconnects, r.failures, r.unsettle)
	if r.toLive.n > 0 {
		fmt.Fprintf(o.out, "  reconnect to live (every stream at the newest second seen when it connected): p50 %s, p99 %s, max %s over %d reconnects\n",
			fmtDur(r.toLive.quantile(0.5)), fmtDur(r.toLive.quantile(0.99)), fmtDur(r.toLive.max), r.toLive.n)
	}
	fmt.Fprintf(o.out, "  heap in use at the end (this process: 3 replicas, %d clients, the simulator): %.1f MiB\n", r.clients, float64(r.heapInUse)/(1<<20))
	if r.historySeconds > 0 {
		fmt.Fprintf(o.out, "  history per stream and replica: %d s × %.0f-byte frames = %.0f KiB of frames (the hub keeps each frame of the last resume_window)\n",
			r.historySeconds, r.frameBytes, float64(r.historySeconds)*r.frameBytes/1024)
	}
	if r.historyKeys > 0 {
		fmt.Fprintf(o.out, "  history in Redis: %d stream keys, %d entries, %d bytes: %.0f bytes and %.0f entries per key\n",
			r.historyKeys, r.historyEntries, r.historyBytes, float64(r.historyBytes)/float64(r.historyKeys), float64(r.historyEntries)/float64(r.historyKeys))
	}
	if r.lastErr != "" {
		fmt.Fprintf(o.out, "  a client's last error: %.200s\n", r.lastErr)
	}
}
