package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"streamgate/config"
	"streamgate/internal/testing/fleet"
	"streamgate/upstreamsim"
)

// wsFeedsPerClient is how many streams each WebSocket client subscribes to.
const wsFeedsPerClient = 10

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
	org := key{ID: upstreamsim.OrgKeyID, Secret: []byte(upstreamsim.OrgKeySecret)}
	rc, err := dialWS(ctx, s.upstream[mainnet], org, st, 0, feeds)
	if err != nil {
		return fmt.Errorf("reference connection to the simulator: %w", err)
	}
	defer rc.CloseNow()
	go fleet.ReadFrames(context.Background(), rc, func(feed []byte, ts, at int64) {
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
	// With -rounds, the two sides are measured that many times each, the
	// order turning each round, and the ratio of their CPU per frame is
	// taken within each round: a round's two windows are a minute apart at
	// most, rounds can be minutes apart, and what this machine does besides
	// moves both sides of one round alike.
	rounds := 1
	if o.set["rounds"] {
		rounds = max(o.rounds, 1)
	}
	sides := []wsSide{{"streamgate", s.gateway[mainnet], true}, {"bare fan-out server (baseline)", bare.URL(), false}}
	var pairs []wsPair
	for round := range rounds {
		var pair wsPair
		for i := range sides {
			side := sides[(i+round)%len(sides)]
			r, err := measureWS(ctx, o, s, feeds, index, ref, st, side.base, side.gateway)
			if err != nil {
				return fmt.Errorf("%s: %w", side.name, err)
			}
			name := side.name
			if rounds > 1 {
				name = fmt.Sprintf("%s, round %d of %d", side.name, round+1, rounds)
			}
			r.print(o, name, side.gateway, clientHeap, clientGoroutines)
			if side.gateway {
				pair.gateway = r
			} else {
				pair.bare = r
			}
			runtime.GC()
			time.Sleep(time.Second) // the closed clients' goroutines end
		}
		pairs = append(pairs, pair)
	}
	if rounds > 1 {
		printWSRatios(o, pairs)
	}
	return nil
}

// wsSide is one server the ws scenario's clients connect to.
type wsSide struct {
	name, base string
	gateway    bool
}

// wsPair is what one round measured of each side.
type wsPair struct{ gateway, bare *wsResult }

// printWSRatios prints, over the rounds, the gateway's CPU per frame and
// heap per client each divided by the bare fan-out server's of the same
// round: median, min and max, then each round's.
func printWSRatios(o *options, pairs []wsPair) {
	var cpu, mem []float64
	for _, p := range pairs {
		cpu = append(cpu, p.gateway.cpuPerFrame()/p.bare.cpuPerFrame())
		if p.gateway.heapPerClient > 0 && p.bare.heapPerClient > 0 { // a GC between two samples can make a delta negative
			mem = append(mem, p.gateway.heapPerClient/p.bare.heapPerClient)
		}
	}
	each := func(rs []float64) string {
		s := make([]string, len(rs))
		for i, r := range rs {
			s[i] = fmt.Sprintf("%.3f", r)
		}
		return strings.Join(s, " ")
	}
	fmt.Fprintf(o.out, "streamgate ÷ bare fan-out server within each round: median [min, max] of %d rounds (each round's, in order)\n", len(pairs))
	fmt.Fprintf(o.out, "  CPU per delivered frame  %.3f [%.3f, %.3f]  (%s)\n", medianF(cpu), slices.Min(cpu), slices.Max(cpu), each(cpu))
	if len(mem) > 0 {
		fmt.Fprintf(o.out, "  heap in use per client   %.3f [%.3f, %.3f]  (%s)\n", medianF(mem), slices.Min(mem), slices.Max(mem), each(mem))
	}
}

// wsResult is what one side of the ws scenario measured.
type wsResult struct {
	conc, feeds                                           int
	secs, t0, t1                                          int64
	connectedBefore, wall, cpu                            time.Duration
	upPeak, accepted                                      int64
	delivered, expected, duplicates, unknown, closedEarly int64
	inWindow, noRef                                       int64
	counts                                                procCounts // of the window (wscounts.go)
	delay                                                 histogram
	heapPerClient, goroutinesPerClient                    float64
}

// cpuPerFrame is the process's CPU in the window per frame that arrived
// in it, in nanoseconds.
func (r *wsResult) cpuPerFrame() float64 {
	return float64(r.cpu) / float64(max(r.inWindow, 1))
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
		fmtDur(time.Duration(r.cpuPerFrame())), r.cpu.Round(time.Millisecond), r.wall.Round(time.Millisecond), r.inWindow)
	perFrame := func(n int64) float64 { return float64(n) / float64(max(r.inWindow, 1)) }
	if r.counts.syscw >= 0 {
		fmt.Fprintf(o.out, "  system calls in the window: %d writes (%.3f per frame), %d reads (%.3f per frame) (the whole process)\n",
			r.counts.syscw, perFrame(r.counts.syscw), r.counts.syscr, perFrame(r.counts.syscr))
	}
	fmt.Fprintf(o.out, "  goroutine runs in the window: about %d (%.2f per frame; the scheduler samples one in %d) (the whole process)\n",
		r.counts.runs, perFrame(r.counts.runs), schedSampling)
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
	r := &wsResult{conc: o.conc, feeds: len(feeds), secs: secs, expected: int64(o.conc) * wsFeedsPerClient * secs}
	accepted0 := s.sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted
	clients := newWSClients(o.conc, len(feeds))
	heap0, gor0 := heap()
	conns, err := connectWSClients(ctx, o, s, clients, feeds, index, st, base)
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
	r.heapPerClient = (float64(heap1) - float64(heap0)) / float64(o.conc)
	r.goroutinesPerClient = float64(gor1-gor0) / float64(o.conc)

	// The measured window: the reports of the seconds [t0, t1], from the
	// second after every client is connected and the hub carries every
	// stream, then as long as the slowest stream takes to publish.
	up := sampleUpstreamPeak(s.sim)
	maxLag := int64(0)
	for _, f := range feeds {
		maxLag = max(maxLag, lagOfStream(s.sim, mainnet, f))
	}
	if gateway {
		if err := waitUpstreamLayout(ctx, s.sim, len(feeds)); err != nil {
			up.stop()
			return nil, err
		}
	}
	r.t0 = time.Now().Unix() + 2
	r.t1 = r.t0 + secs - 1
	r.connectedBefore = time.Unix(r.t0, 0).Sub(connected)
	wall0, err := measureWSWindow(ctx, o, r, up, maxLag, gateway)
	if err != nil {
		return nil, err
	}
	r.upPeak, r.accepted = up.peak.Load(), s.sim.Counters().WSTotal(upstreamsim.Mainnet).Accepted-accepted0
	r.countWS(clients, ref, wall0)
	return r, nil
}

// newWSClients returns n clients, each of wsFeedsPerClient streams of a
// block of the feeds.
func newWSClients(n, feeds int) []*wsClient {
	clients := make([]*wsClient, n)
	for i := range clients {
		c := &wsClient{}
		block := i % (feeds / wsFeedsPerClient)
		for k := range wsFeedsPerClient {
			c.feeds = append(c.feeds, block*wsFeedsPerClient+k)
		}
		clients[i] = c
	}
	return clients
}

// connectWSClients connects the clients, each keeping what it receives.
func connectWSClients(ctx context.Context, o *options, s *stack, clients []*wsClient, feeds []string, index map[string]int, st *stamps, base string) ([]*websocket.Conn, error) {
	return connectAll(ctx, o.conc, func(i int) (*websocket.Conn, error) {
		ids := make([]string, len(clients[i].feeds))
		for k, f := range clients[i].feeds {
			ids[k] = feeds[f]
		}
		return dialWS(ctx, base, s.clientKeys[i], st, i, ids)
	}, func(i int, c *websocket.Conn) {
		cl := clients[i]
		err := fleet.ReadFrames(context.Background(), c, func(feed []byte, ts, at int64) {
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
}

// upstreamOthers are the simulator's connections that are not the
// gateway's: the reference's, and the bare server's.
const upstreamOthers = 2

// upstreamPeak samples every 10 ms the upstream connections held, minus
// upstreamOthers, keeping the most once measuring is set.
type upstreamPeak struct {
	peak      atomic.Int64
	measuring atomic.Bool
	done      chan struct{}
	sampled   chan struct{}
}

func sampleUpstreamPeak(sim *upstreamsim.Simulator) *upstreamPeak {
	u := &upstreamPeak{done: make(chan struct{}), sampled: make(chan struct{})}
	go func() {
		defer close(u.sampled)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if n := sim.Counters().WSTotal(upstreamsim.Mainnet).Open - upstreamOthers; u.measuring.Load() && n > u.peak.Load() {
				u.peak.Store(n)
			}
			select {
			case <-u.done:
				return
			case <-t.C:
			}
		}
	}()
	return u
}

func (u *upstreamPeak) stop() {
	close(u.done)
	<-u.sampled
}

// waitUpstreamLayout waits (at most 10 s) until the gateway's upstream
// connections are the layout's, one per chunk: the last make-before-break
// switch of the subscriptions (its old connection held until the new one
// delivers) is over. Otherwise a switch still in flight is counted as a
// connection held in the window.
func waitUpstreamLayout(ctx context.Context, sim *upstreamsim.Simulator, feeds int) error {
	chunks := int64((feeds + config.DefaultWSFeedsPerConnection - 1) / config.DefaultWSFeedsPerConnection)
	settle := time.Now().Add(10 * time.Second)
	for sim.Counters().WSTotal(upstreamsim.Mainnet).Open-upstreamOthers > chunks && time.Now().Before(settle) {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// measureWSWindow waits for r.t0, then measures this process's CPU, its
// system calls and goroutine runs (and the profile: the gateway's in
// -cpuprofile, the bare server's in the same name with .bare) until the slowest stream has published r.t1;
// it returns when the window began, and stops up.
func measureWSWindow(ctx context.Context, o *options, r *wsResult, up *upstreamPeak, maxLag int64, gateway bool) (time.Time, error) {
	select {
	case <-time.After(time.Until(time.Unix(r.t0, 0))):
	case <-ctx.Done():
		up.stop()
		return time.Time{}, ctx.Err()
	}
	start, stop := o.profileStart, o.profileStop
	if !gateway {
		start, stop = o.bareProfileStart, o.bareProfileStop
	}
	if err := start(); err != nil {
		up.stop()
		return time.Time{}, err
	}
	cpu0, wall0, counts0 := processCPU(), time.Now(), readProcCounts()
	up.measuring.Store(true)
	end := time.Unix(r.t1+maxLag+1, int64(500*time.Millisecond))
	select {
	case <-time.After(time.Until(end)):
	case <-ctx.Done():
		stop()
		up.stop()
		return time.Time{}, ctx.Err()
	}
	r.cpu, r.wall, r.counts = processCPU()-cpu0, time.Since(wall0), readProcCounts().sub(counts0)
	stop()
	up.stop()
	return wall0, nil
}

// countWS counts what the clients received: each (stream, second) once,
// the ones of the window [r.t0, r.t1] with their delay after the
// reference's receipt.
func (r *wsResult) countWS(clients []*wsClient, ref *refTimes, wall0 time.Time) {
	for _, c := range clients {
		c.mu.Lock()
		seen := map[[2]int64]bool{}
		for _, a := range c.got {
			k := [2]int64{int64(a.feed), a.ts}
			if seen[k] {
				r.duplicates++
				continue
			}
			seen[k] = true
			if a.at >= wall0.UnixNano() && a.at < wall0.Add(r.wall).UnixNano() {
				r.inWindow++
			}
			if a.ts < r.t0 || a.ts > r.t1 {
				continue
			}
			r.delivered++
			if at, ok := ref.get(a.feed, a.ts); ok {
				r.delay.record(time.Duration(a.at - at))
			} else {
				r.noRef++
			}
		}
		if c.closed != nil {
			r.closedEarly++
		}
		r.unknown += c.unknown
		c.mu.Unlock()
	}
}
