package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"streamgate/catalog"
	"streamgate/config"
	"streamgate/simulator"
)

// wsFeedsPerClient is how many streams each WebSocket client subscribes to.
const wsFeedsPerClient = 10

// frameHead is what a client reads of each frame.
type frameHead struct {
	Report struct {
		FeedID                string `json:"feedID"`
		ObservationsTimestamp int64  `json:"observationsTimestamp"`
	} `json:"report"`
}

// arrival is one frame a client received.
type arrival struct {
	feed int   // index into the scenario's streams
	ts   int64 // observationsTimestamp
	at   int64 // arrival, Unix nanoseconds
}

// wsClient is one WebSocket client: its streams and what it received.
type wsClient struct {
	feeds    []int
	mu       sync.Mutex
	got      []arrival
	closed   error
	unknown  int64 // frames of a stream it did not ask for
	notReady bool
}

// refTimes holds, per (stream, second), when a reference client connected
// straight to the simulator received the report: the gateway's hub reads
// the same upstream at the same moment, so this is the gateway's receipt
// time to within the simulator's writing of two connections.
type refTimes struct {
	mu sync.Mutex
	at map[[2]int64]int64
}

func (r *refTimes) get(feed int, ts int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.at[[2]int64{int64(feed), ts}]
	return v, ok
}

// readFrames reads c's frames until it ends, handing each frame's stream
// ID and observationsTimestamp to fn with its arrival time (feed is valid
// during the call only). Each frame is read into one reused buffer and the
// two fields are picked out of the JSON without decoding it: at 10000
// frames a second, allocating and decoding each would be most of this
// process's CPU, and would be counted in the added delay it measures.
func readFrames(ctx context.Context, c *websocket.Conn, fn func(feed []byte, ts, at int64)) error {
	buf := make([]byte, 0, 4096)
	for {
		_, r, err := c.Reader(ctx)
		if err != nil {
			return err
		}
		at := time.Now().UnixNano()
		buf = buf[:0]
		for err == nil {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			var n int
			n, err = r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		feed, ts, err := frameFields(buf)
		if err != nil {
			return err
		}
		fn(feed, ts, at)
	}
}

var (
	feedField = []byte(`"feedID":"`)
	tsField   = []byte(`"observationsTimestamp":`)
)

// frameFields returns the feedID and observationsTimestamp of a report
// frame as the upstream writes it (compact JSON, each field once).
func frameFields(b []byte) (feed []byte, ts int64, err error) {
	i := bytes.Index(b, feedField)
	if i < 0 {
		return nil, 0, fmt.Errorf("a frame without feedID: %.80q", b)
	}
	feed = b[i+len(feedField):]
	j := bytes.IndexByte(feed, '"')
	if j < 0 {
		return nil, 0, fmt.Errorf("a frame with an unterminated feedID: %.80q", b)
	}
	feed = feed[:j]
	k := bytes.Index(b, tsField)
	if k < 0 {
		return nil, 0, fmt.Errorf("a frame without observationsTimestamp: %.80q", b)
	}
	digits := b[k+len(tsField):]
	n := 0
	for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
		n++
	}
	ts, err = strconv.ParseInt(string(digits[:n]), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("a frame's observationsTimestamp: %w", err)
	}
	return feed, ts, nil
}

// dialWS opens a signed WebSocket to base (http://host:port) for feeds.
func dialWS(ctx context.Context, base string, k key, st *stamps, keyIndex int, feeds []string) (*websocket.Conn, error) {
	return dialOrigin(ctx, base, k, st, keyIndex, feeds, "")
}

// heap returns the heap in use and the goroutines after a collection.
func heap() (uint64, int) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse, runtime.NumGoroutine()
}

// connectAll dials n clients (at most 50 at a time) and starts a reader
// for each; it returns the connections.
func connectAll(ctx context.Context, n int, dial func(i int) (*websocket.Conn, error), read func(i int, c *websocket.Conn)) ([]*websocket.Conn, error) {
	conns := make([]*websocket.Conn, n)
	errs := make([]error, n)
	sem := make(chan struct{}, 50)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conns[i], errs[i] = dial(i)
			if errs[i] == nil {
				go read(i, conns[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, c := range conns {
			if c != nil {
				c.CloseNow()
			}
		}
		return nil, err
	}
	return conns, ctx.Err()
}

// clientOnlyHeap measures what n WebSocket clients cost this process
// without the gateway: the same clients held open by a bare coder/websocket
// server that sends nothing. It returns heap bytes and goroutines per
// client, both ends together (client and bare server).
func clientOnlyHeap(ctx context.Context, n int) (float64, float64, error) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return
		}
		defer c.CloseNow()
		<-c.CloseRead(context.Background()).Done()
	}))
	defer srv.Close()
	h0, g0 := heap()
	conns, err := connectAll(ctx, n, func(int) (*websocket.Conn, error) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/", &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
		return c, err
	}, func(_ int, c *websocket.Conn) { c.Read(context.Background()) })
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(200 * time.Millisecond)
	h1, g1 := heap()
	for _, c := range conns {
		c.CloseNow()
	}
	return (float64(h1) - float64(h0)) / float64(n), float64(g1-g0) / float64(n), nil
}

// scenarioWS: N WebSocket clients, each subscribed to 10 of 100 live
// mainnet streams (each stream wanted by N/10 clients), on one gateway.
func scenarioWS(ctx context.Context, o *options) error {
	if !o.set["c"] {
		o.conc = 1000
	}
	if !o.set["streams"] {
		o.streams = 100
	}
	if o.streams < wsFeedsPerClient {
		return fmt.Errorf("-streams must be at least %d", wsFeedsPerClient)
	}
	if o.dur < time.Second || o.dur > 10*time.Minute {
		return errors.New("ws: -d between 1s and 10m")
	}

	// What the clients alone cost, without the gateway, measured first.
	clientHeap, clientGoroutines, err := clientOnlyHeap(ctx, o.conc)
	if err != nil {
		return fmt.Errorf("clients alone: %w", err)
	}

	s, err := startStack(stackConfig{ClientKeys: o.conc, LogLevel: o.logLevel, WS: true, TeamConnections: o.conc + 10})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.warm(ctx); err != nil {
		return err
	}
	feeds, err := publishingStreams(s.sim, mainnet, o.streams, !o.set["streams"])
	if err != nil {
		return err
	}
	index := map[string]int{}
	for i, f := range feeds {
		index[f] = i
	}
	fmt.Fprintf(o.out, "ws: %d WebSocket clients, each subscribed to %d of %d publishing mainnet streams (each stream wanted by %d clients), %v measured, one gateway, access log %s\n",
		o.conc, wsFeedsPerClient, len(feeds), o.conc*wsFeedsPerClient/len(feeds), o.dur, o.logLevel)

	// The reference: one connection straight to the simulator, org key.
	ref := &refTimes{at: map[[2]int64]int64{}}
	st := newStamps()
	org := key{ID: simulator.OrgKeyID, Secret: []byte(simulator.OrgKeySecret)}
	rc, err := dialWS(ctx, s.upstream[mainnet], org, st, 0, feeds)
	if err != nil {
		return fmt.Errorf("reference connection to the simulator: %w", err)
	}
	defer rc.CloseNow()
	go readFrames(context.Background(), rc, func(feed []byte, ts, at int64) {
		if i, ok := index[string(feed)]; ok {
			ref.mu.Lock()
			ref.at[[2]int64{int64(i), ts}] = at
			ref.mu.Unlock()
		}
	})

	bare, err := startBareFanout(ctx, s.upstream[mainnet], feeds)
	if err != nil {
		return fmt.Errorf("the bare fan-out server: %w", err)
	}
	defer bare.Close()
	for _, side := range []struct {
		name, base string
		gateway    bool
	}{{"streamgate", s.gateway[mainnet], true}, {"bare fan-out server (baseline)", bare.URL(), false}} {
		r, err := measureWS(ctx, o, s, feeds, index, ref, st, side.base, side.gateway)
		if err != nil {
			return fmt.Errorf("%s: %w", side.name, err)
		}
		r.print(o, side.name, side.gateway, clientHeap, clientGoroutines)
		runtime.GC()
		time.Sleep(time.Second) // the closed clients' goroutines end
	}
	return nil
}

// wsResult is what one side of the ws scenario measured.
type wsResult struct {
	conc, feeds                                           int
	secs, t0, t1                                          int64
	connectedBefore, wall, cpu                            time.Duration
	upPeak, accepted                                      int64
	delivered, expected, duplicates, unknown, closedEarly int64
	inWindow, noRef                                       int64
	delay                                                 histogram
	heapPerClient, goroutinesPerClient                    float64
}

func (r *wsResult) print(o *options, name string, gateway bool, clientHeap, clientGoroutines float64) {
	fmt.Fprintf(o.out, "%s:\n", name)
	fmt.Fprintf(o.out, "  window: reports of %d whole seconds (observationsTimestamp %d..%d), read until %v after its start; clients connected %v before it\n",
		r.secs, r.t0, r.t1, r.wall.Round(time.Millisecond), r.connectedBefore.Round(time.Millisecond))
	if gateway {
		fmt.Fprintf(o.out, "  upstream WebSocket connections held: at most %d at once during the window (goal ≤ 2 for %d streams); %d accepted in all (a make-before-break switch while clients subscribe holds one more for a moment)\n",
			r.upPeak, r.feeds, r.accepted)
	} else {
		fmt.Fprintf(o.out, "  upstream WebSocket connections held: 1, for every stream\n")
	}
	fmt.Fprintf(o.out, "  frames delivered %d of %d expected (%s); duplicates %d; frames of streams not asked %d; clients closed early %d\n",
		r.delivered, r.expected, ratio(float64(r.delivered), float64(r.expected)), r.duplicates, r.unknown, r.closedEarly)
	fmt.Fprintf(o.out, "  added delay (client arrival − a direct upstream client's arrival of the same report): p50 %s, p90 %s, p99 %s, max %s (goal p99 ≤ 5ms); %d frames without a reference time\n",
		fmtDur(r.delay.quantile(.5)), fmtDur(r.delay.quantile(.9)), fmtDur(r.delay.quantile(.99)), fmtDur(r.delay.max), r.noRef)
	fmt.Fprintf(o.out, "  CPU per delivered frame %s (process CPU %v over %v, %d frames arrived in it; client, server and simulator together)\n",
		fmtDur(time.Duration(float64(r.cpu)/float64(max(r.inWindow, 1)))), r.cpu.Round(time.Millisecond), r.wall.Round(time.Millisecond), r.inWindow)
	fmt.Fprintf(o.out, "  memory per client: heap in use %.1f KiB, goroutines %.2f (server and this client together: an upper bound of the server's; goal ≤ 64 KiB)\n",
		r.heapPerClient/1024, r.goroutinesPerClient)
	if gateway {
		fmt.Fprintf(o.out, "    the same clients held by a bare coder/websocket server: %.1f KiB, %.2f goroutines per client; the gateway beyond that: %.1f KiB, %.2f goroutines\n",
			clientHeap/1024, clientGoroutines, (r.heapPerClient-clientHeap)/1024, r.goroutinesPerClient-clientGoroutines)
	}
}

// measureWS connects the scenario's clients to base (the gateway when
// gateway is set, else the bare fan-out server), measures the window and
// closes them.
func measureWS(ctx context.Context, o *options, s *stack, feeds []string, index map[string]int, ref *refTimes, st *stamps, base string, gateway bool) (*wsResult, error) {
	secs := int64(o.dur / time.Second)
	r := &wsResult{conc: o.conc, feeds: len(feeds), secs: secs}
	accepted0 := s.sim.Counters().WSTotal(simulator.Mainnet).Accepted
	clients := make([]*wsClient, o.conc)
	for i := range clients {
		c := &wsClient{}
		block := i % (len(feeds) / wsFeedsPerClient)
		for k := range wsFeedsPerClient {
			c.feeds = append(c.feeds, block*wsFeedsPerClient+k)
		}
		clients[i] = c
	}
	heap0, gor0 := heap()
	conns, err := connectAll(ctx, o.conc, func(i int) (*websocket.Conn, error) {
		ids := make([]string, len(clients[i].feeds))
		for k, f := range clients[i].feeds {
			ids[k] = feeds[f]
		}
		return dialWS(ctx, base, s.clientKeys[i], st, i, ids)
	}, func(i int, c *websocket.Conn) {
		cl := clients[i]
		err := readFrames(context.Background(), c, func(feed []byte, ts, at int64) {
			f, ok := index[string(feed)]
			cl.mu.Lock()
			if ok {
				cl.got = append(cl.got, arrival{feed: f, ts: ts, at: at})
			} else {
				cl.unknown++
			}
			cl.mu.Unlock()
		})
		cl.mu.Lock()
		cl.closed = err
		cl.mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("connecting the clients: %w", err)
	}
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	connected := time.Now()
	time.Sleep(200 * time.Millisecond)
	heap1, gor1 := heap()

	// The measured window: the reports of the seconds [t0, t1], from the
	// second after every client is connected and the hub carries every
	// stream, then as long as the slowest stream takes to publish.
	// The simulator's connections that are not the gateway's: the
	// reference's, and the bare server's.
	upstreamOthers := 2
	var upPeak atomic.Int64
	var measuring atomic.Bool // connections are counted from the window on
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // upstream connections held, minus the reference
		defer close(sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if n := s.sim.Counters().WSTotal(simulator.Mainnet).Open - int64(upstreamOthers); measuring.Load() && n > upPeak.Load() {
				upPeak.Store(n)
			}
			select {
			case <-stopSampling:
				return
			case <-t.C:
			}
		}
	}()
	maxLag := int64(0)
	for _, f := range feeds {
		maxLag = max(maxLag, lagOfStream(s.sim, mainnet, f))
	}
	if gateway {
		// The window opens once the gateway's upstream connections are
		// the layout's, one per chunk: the last make-before-break switch
		// of the subscriptions (its old connection held until the new one
		// delivers) is over. Otherwise a switch still in flight is counted
		// as a connection held in the window.
		chunks := int64((len(feeds) + config.DefaultWSFeedsPerConnection - 1) / config.DefaultWSFeedsPerConnection)
		settle := time.Now().Add(10 * time.Second)
		for s.sim.Counters().WSTotal(simulator.Mainnet).Open-int64(upstreamOthers) > chunks && time.Now().Before(settle) {
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	t0 := time.Now().Unix() + 2
	t1 := t0 + secs - 1
	wait := time.Until(time.Unix(t0, 0))
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if gateway {
		if err := o.profileStart(); err != nil {
			return nil, err
		}
	}
	cpu0, wall0 := processCPU(), time.Now()
	measuring.Store(true)
	end := time.Unix(t1+maxLag+1, int64(500*time.Millisecond))
	select {
	case <-time.After(time.Until(end)):
	case <-ctx.Done():
		o.profileStop()
		return nil, ctx.Err()
	}
	cpu, wall := processCPU()-cpu0, time.Since(wall0)
	o.profileStop()
	close(stopSampling)
	<-sampled

	// Count.
	var delivered, duplicates, outside, inWindow, closedEarly, unknown int64
	var delay histogram
	var noRef int64
	for _, c := range clients {
		c.mu.Lock()
		seen := map[[2]int64]bool{}
		for _, a := range c.got {
			k := [2]int64{int64(a.feed), a.ts}
			if seen[k] {
				duplicates++
				continue
			}
			seen[k] = true
			if a.at >= wall0.UnixNano() && a.at < wall0.Add(wall).UnixNano() {
				inWindow++
			}
			if a.ts < t0 || a.ts > t1 {
				outside++
				continue
			}
			delivered++
			if r, ok := ref.get(a.feed, a.ts); ok {
				delay.record(time.Duration(a.at - r))
			} else {
				noRef++
			}
		}
		if c.closed != nil {
			closedEarly++
		}
		unknown += c.unknown
		c.mu.Unlock()
	}
	r.expected = int64(o.conc) * wsFeedsPerClient * secs
	r.t0, r.t1, r.wall, r.cpu = t0, t1, wall, cpu
	r.connectedBefore = time.Unix(t0, 0).Sub(connected)
	r.upPeak, r.accepted = upPeak.Load(), s.sim.Counters().WSTotal(simulator.Mainnet).Accepted-accepted0
	r.delivered, r.duplicates, r.unknown, r.closedEarly, r.inWindow, r.noRef = delivered, duplicates, unknown, closedEarly, inWindow, noRef
	r.delay = delay
	r.heapPerClient = (float64(heap1) - float64(heap0)) / float64(o.conc)
	r.goroutinesPerClient = float64(gor1-gor0) / float64(o.conc)
	_ = outside
	return r, nil
}

// lagOfStream is the publication delay of a stream, read within a second.
func lagOfStream(sim *simulator.Simulator, network, feed string) int64 {
	for range 5 {
		before := time.Now().Unix()
		_, last, _ := sim.Window(network, feed)
		if now := time.Now().Unix(); now == before {
			return now - last
		}
	}
	return 3
}

// scenarioWSLatest: clients polling REST latest of streams the gateway
// carries on its upstream WebSocket (pinned): upstream latest calls once
// the streams are up, and the age of each answer.
func scenarioWSLatest(ctx context.Context, o *options) error {
	if !o.set["c"] {
		o.conc = 200
	}
	if !o.set["streams"] {
		o.streams = 100
	}
	probe, err := startStack(stackConfig{LogLevel: "off"})
	if err != nil {
		return err
	}
	feeds, err := publishingStreams(probe.sim, mainnet, o.streams, !o.set["streams"])
	probe.Close()
	if err != nil {
		return err
	}
	s, err := startStack(stackConfig{ClientKeys: o.conc, LogLevel: o.logLevel, WS: true, WSPinned: feeds})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.warm(ctx); err != nil {
		return err
	}
	lag := make([]int64, len(feeds))
	for i, f := range feeds {
		lag[i] = lagOfStream(s.sim, mainnet, f)
	}
	client, st := newClient(o.conc), newStamps()
	// Wait (bounded) until every pinned stream is answered from the stream.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < len(feeds); {
		a, err := get(ctx, client, st, &s.clientKeys[0], s.gateway[mainnet], latestTarget(feeds[i]))
		if err != nil {
			return err
		}
		if a.status == http.StatusOK && a.header.Get("X-Cache") == "STREAM" {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answered from the stream after 20 s (X-Cache %q)", feeds[i], a.header.Get("X-Cache"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(o.out, "ws-latest: %d clients polling GET /api/v1/reports/latest of %d streams pinned on the upstream WebSocket (networks.mainnet.upstream.ws_pinned), %v, after every stream answers from the stream\n",
		o.conc, len(feeds), o.dur)
	s.resetCounters()
	type wres struct {
		n, errs int64
		status  map[int]int64
		xcache  map[string]int64
		age     histogram
		ageLag  histogram
		lat     histogram
	}
	res := make([]*wres, o.conc)
	cpu0 := processCPU()
	start := time.Now()
	stop := start.Add(o.dur)
	var wg sync.WaitGroup
	for w := range o.conc {
		r := &wres{status: map[int]int64{}, xcache: map[string]int64{}}
		res[w] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w)+1, 7))
			k := &s.clientKeys[w]
			for ctx.Err() == nil && time.Now().Before(stop) {
				i := rng.IntN(len(feeds))
				t := time.Now()
				a, err := get(ctx, client, st, k, s.gateway[mainnet], latestTarget(feeds[i]))
				if err != nil {
					r.errs++
					continue
				}
				now := time.Now()
				r.lat.record(now.Sub(t))
				r.n++
				r.status[a.status]++
				r.xcache[a.header.Get("X-Cache")]++
				var doc frameHead
				if a.status == http.StatusOK && json.Unmarshal(a.body, &doc) == nil {
					age := now.Sub(time.Unix(doc.Report.ObservationsTimestamp, 0))
					r.age.record(age)
					r.ageLag.record(age - time.Duration(lag[i])*time.Second)
				}
			}
		}()
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	tot := &wres{status: map[int]int64{}, xcache: map[string]int64{}}
	for _, r := range res {
		tot.n += r.n
		tot.errs += r.errs
		addCounts(tot.status, r.status)
		addCounts(tot.xcache, r.xcache)
		tot.age.merge(&r.age)
		tot.ageLag.merge(&r.ageLag)
		tot.lat.merge(&r.lat)
	}
	c := s.sim.Counters()
	calls := c.ByEndpoint(simulator.Mainnet, simulator.EndpointLatest)
	fmt.Fprintf(o.out, "requests %d (%.0f/s), errors %d, statuses %s, X-Cache %s; latency p50 %s p99 %s; CPU per request %s\n",
		tot.n, float64(tot.n)/elapsed.Seconds(), tot.errs, fmtCounts(tot.status), fmtCounts(tot.xcache),
		fmtDur(tot.lat.quantile(.5)), fmtDur(tot.lat.quantile(.99)), fmtDur(time.Duration(float64(cpu)/float64(max(tot.n, 1)))))
	fmt.Fprintf(o.out, "upstream REST latest calls %d (goal 0); other upstream REST calls %d; upstream WebSocket connections open %d\n",
		calls, c.Total()-calls-c.ByEndpoint(simulator.Mainnet, simulator.EndpointWS)-c.ByEndpoint(simulator.Testnet, simulator.EndpointWS), c.WSTotal(simulator.Mainnet).Open)
	fmt.Fprintf(o.out, "answer age now − observationsTimestamp: p50 %s, p99 %s, max %s (goal p99 ≤ 1.5s); minus each stream's publication delay: p50 %s, p99 %s, max %s\n",
		fmtDur(tot.age.quantile(.5)), fmtDur(tot.age.quantile(.99)), fmtDur(tot.age.max),
		fmtDur(tot.ageLag.quantile(.5)), fmtDur(tot.ageLag.quantile(.99)), fmtDur(tot.ageLag.max))
	return nil
}

// publishingStreams returns n public streams of network that publish now
// (every second), whatever their history or status. When fewer exist and
// orFewer is set, it returns them all, down to a multiple of
// wsFeedsPerClient.
func publishingStreams(sim *simulator.Simulator, network string, n int, orFewer bool) ([]string, error) {
	now := time.Now().Unix()
	out := publicStreams(sim, network, n, func(_ catalog.Stream, _, last int64) bool { return last >= now-5 })
	if orFewer && len(out) < n {
		out = out[:len(out)/wsFeedsPerClient*wsFeedsPerClient]
	}
	if len(out) < n && !orFewer || len(out) == 0 {
		return nil, fmt.Errorf("the simulator has %d public streams publishing on %s, %d asked for", len(out), network, n)
	}
	return out, nil
}
