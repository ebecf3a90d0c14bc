package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"time"
)

// hitSide is one server of the hit scenario and what its rounds measured.
type hitSide struct {
	label  string
	desc   string
	child  *child
	load   *load
	total  *result
	rounds []hitRound
	next   func(int64, int, *rand.Rand) call // nil: the latest targets
	shared bool                              // child is another side's
	// idleCPU is the CPU the server spent in a second without requests.
	idleCPU time.Duration
}

// hitRound is one measured run of a side.
type hitRound struct {
	requests   int64
	serverCPU  time.Duration
	allocs     uint64
	allocBytes uint64
}

func (r hitRound) cpuPerRequest() time.Duration {
	if r.requests == 0 {
		return 0
	}
	return r.serverCPU / time.Duration(r.requests)
}

// scenarioHit: the latest report through the gateway, a pure cache hit,
// against a bare net/http server that verifies the same signature and
// sends the same bytes, and one that only sends the bytes. Each server
// runs in a process of its own (see childEnv), pinned to the first CPU
// when taskset is there and the machine has two or more; this process, the
// client, is pinned to the second. What is compared is each server
// process's CPU time per request, in rounds run one side after the other
// (the order turning each round), as the median over the rounds of the
// ratio within each round.
func scenarioHit(ctx context.Context, o *options) error {
	h := &hitRun{o: o, ttl: o.latestTTL}
	if h.ttl == 0 {
		h.ttl = time.Hour
	}
	if !o.set["rounds"] {
		o.rounds = 5
	}
	h.rounds = max(o.rounds, 1)
	if err := h.pin(); err != nil {
		return err
	}
	defer h.close()
	h.client, h.st = newClient(o.conc), newStamps()
	if err := h.startGateways(ctx); err != nil {
		return err
	}
	h.keys = make([]key, o.conc)
	for i := range h.keys {
		id, secret := benchKey("c", i)
		h.keys[i] = key{ID: id, Secret: []byte(secret)}
	}
	answers, err := h.recordAnswers(ctx)
	if err != nil {
		return err
	}
	if _, err := h.start(ctx, "bare-hmac", "bare-hmac", "net/http (the gateway's server timeouts), verifies the signature, sends the recorded answer",
		childSetup{Conc: o.conc, Answers: answers}); err != nil {
		return err
	}
	if _, err := h.start(ctx, "bare", "bare", "net/http (the gateway's server timeouts), sends the recorded answer",
		childSetup{Conc: o.conc, Answers: answers}); err != nil {
		return err
	}
	if err := h.addBulk(ctx); err != nil {
		return err
	}
	h.prepare(ctx)
	if err := h.measureIdle(ctx); err != nil {
		return err
	}
	if err := h.runRounds(ctx); err != nil {
		return err
	}
	h.print()
	return nil
}

// hitRun is one run of the hit scenario: its servers (sides) and the
// client's parts.
type hitRun struct {
	o                 *options
	ttl               time.Duration
	rounds            int
	serverCPU, pinned string // the servers' CPU for taskset ("": none), and what was pinned, in words
	sides             []*hitSide
	gw                *hitSide         // the first gateway
	sink              *httptest.Server // the collector stand-in of -tracing, closed after the gateways
	certDir           string
	client            *http.Client
	st                *stamps
	keys              []key
	targets           []string // the latest targets, one per stream
	idle              time.Duration
}

// pin pins this process, the client, to CPU 1 and has the servers pinned
// to CPU 0, where there is taskset and two CPUs and -pin is on.
func (h *hitRun) pin() error {
	if _, err := exec.LookPath("taskset"); err == nil && runtime.NumCPU() >= 2 && h.o.pin {
		h.serverCPU = "0"
		if err := exec.Command("taskset", "-a", "-p", "-c", "1", strconv.Itoa(os.Getpid())).Run(); err != nil {
			return fmt.Errorf("pinning the client to CPU 1: %w", err)
		}
		h.pinned = "servers pinned to CPU 0, this client (all its threads) to CPU 1, by taskset"
	} else {
		h.pinned = "not pinned (no taskset, fewer than 2 CPUs, or -pin=false): other work on the machine is counted to no side, but shares the CPUs"
	}
	return nil
}

// close stops every server, then the collector stand-in.
func (h *hitRun) close() {
	for _, sd := range h.sides {
		if !sd.shared {
			sd.child.stop()
		}
	}
	if h.sink != nil {
		h.sink.Close()
	}
	if h.certDir != "" {
		os.RemoveAll(h.certDir)
	}
}

// start starts a server process of role and adds it as a side.
func (h *hitRun) start(ctx context.Context, label, role, desc string, setup childSetup) (*hitSide, error) {
	c, err := startChild(ctx, role, setup, h.serverCPU)
	if err != nil {
		return nil, err
	}
	sd := &hitSide{label: label, desc: desc, child: c, total: newResult()}
	h.sides = append(h.sides, sd)
	return sd, nil
}

// startGateways starts the gateway, and as the flags ask the gateway
// without access log, over TLS and tracing at three sample ratios.
func (h *hitRun) startGateways(ctx context.Context) error {
	o := h.o
	base := childSetup{Conc: o.conc, LogLevel: o.logLevel, LatestTTL: h.ttl, Streams: o.streams}
	var err error
	if h.gw, err = h.start(ctx, "gateway", "gateway", "streamgate, access log "+o.logLevel, base); err != nil {
		return err
	}
	if o.logLevel != "off" {
		setup := base
		setup.LogLevel = "off"
		if _, err := h.start(ctx, "gw-nolog", "gateway", "streamgate, access log off", setup); err != nil {
			return err
		}
	}
	if o.hitTLS {
		files, pool, err := benchCert()
		if err != nil {
			return err
		}
		h.certDir = files.dir
		// HTTP/1.1 on both sides, so that the difference is TLS alone.
		h.client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}
		setup := base
		setup.TLSCert, setup.TLSKey = files.cert, files.key
		if _, err := h.start(ctx, "gw-tls", "gateway", "streamgate over TLS 1.3 (HTTP/1.1, kept-alive connections), access log "+o.logLevel, setup); err != nil {
			return err
		}
	}
	if o.hitTracing {
		h.sink = otlpSink()
		for _, r := range []struct {
			label string
			ratio float64
		}{{"gw-trace0", 0}, {"gw-trace1%", 0.01}, {"gw-trace100", 1}} {
			setup := base
			setup.Traces, setup.Ratio = h.sink.URL, r.ratio
			if _, err := h.start(ctx, r.label, "gateway", fmt.Sprintf("streamgate tracing at sample_ratio %v (OTLP/HTTP), access log %s", r.ratio, o.logLevel), setup); err != nil {
				return err
			}
		}
	}
	return nil
}

// recordAnswers fills each gateway's cache, then records each stream's
// answer, a hit, for the bare servers (Date and Content-Length are the
// server's own).
func (h *hitRun) recordAnswers(ctx context.Context) (map[string]*childAnswer, error) {
	feeds := h.gw.child.ready.Feeds
	h.targets = make([]string, len(feeds))
	for i, f := range feeds {
		h.targets[i] = latestTarget(f)
	}
	answers := map[string]*childAnswer{}
	for _, sd := range h.sides {
		for _, t := range h.targets {
			if _, err := get(ctx, h.client, h.st, &h.keys[0], sd.child.ready.URL, t); err != nil {
				return nil, err
			}
		}
		for _, t := range h.targets {
			a, err := h.hit(ctx, sd.child.ready.URL, t)
			if err != nil {
				return nil, err
			}
			a.header.Del("Date")
			a.header.Del("Content-Length")
			answers[t] = &childAnswer{Status: a.status, Header: a.header, Body: a.body}
		}
	}
	return answers, nil
}

// hit asks for target until the answer is a cache hit (the cache's
// writes are asynchronous), at most 51 times.
func (h *hitRun) hit(ctx context.Context, base, target string) (*answer, error) {
	for try := 0; ; try++ {
		a, err := get(ctx, h.client, h.st, &h.keys[0], base, target)
		if err != nil {
			return nil, err
		}
		if a.status == http.StatusOK && a.header.Get("X-Cache") == "HIT" {
			return a, nil
		}
		if try == 50 {
			return nil, fmt.Errorf("warming %s: status %d, X-Cache %q: %.200s", target, a.status, a.header.Get("X-Cache"), a.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// addBulk adds, with -hit-bulk n, the side of bulk requests of n of the
// streams at one timestamp, all cached once the first has been answered,
// on the first gateway.
func (h *hitRun) addBulk(ctx context.Context) error {
	n := h.o.hitBulk
	if n <= 0 {
		return nil
	}
	feeds := h.gw.child.ready.Feeds
	if n > len(feeds) {
		return fmt.Errorf("-hit-bulk %d: only %d streams (-streams)", n, len(feeds))
	}
	target := bulkTarget(feeds[:n], time.Now().Add(-time.Hour).Unix())
	if _, err := h.hit(ctx, h.gw.child.ready.URL, target); err != nil {
		return err
	}
	h.sides = append(h.sides, &hitSide{label: "gw-bulk", desc: fmt.Sprintf("streamgate (the gateway above), bulk of %d streams, every one cached", n),
		child: h.gw.child, total: newResult(), shared: true,
		next: func(int64, int, *rand.Rand) call { return call{Target: target} }})
	return nil
}

// prepare prints the run's description and each side's, and gives each
// side its load, warmed up unmeasured.
func (h *hitRun) prepare(ctx context.Context) {
	o := h.o
	next := func(i int64, _ int, _ *rand.Rand) call { return call{Target: h.targets[i%int64(len(h.targets))]} }
	fmt.Fprintf(o.out, "hit: GET /api/v1/reports/latest over %d streams, latest_ttl %v (every answer a cache hit), %d clients, %d rounds of %v per side; team rate and daily quota on (never refusing), replay protection on\n",
		len(h.targets), h.ttl, o.conc, h.rounds, o.dur/time.Duration(h.rounds))
	fmt.Fprintf(o.out, "  %s; server GOMAXPROCS %d\n", h.pinned, h.gw.child.ready.Procs)
	for _, sd := range h.sides {
		fmt.Fprintf(o.out, "  %-9s %s\n", sd.label, sd.desc)
		if sd.next == nil {
			sd.next = next
		}
		sd.load = o.newLoad(h.client, sd.child.ready.URL, h.keys, h.st, sd.next)
		sd.load.Duration = max(o.dur/time.Duration(h.rounds), time.Millisecond)
		if o.maxRequests > 0 {
			sd.load.MaxRequests = max(o.maxRequests/int64(h.rounds), 1)
		}
		if o.warmup > 0 {
			w := *sd.load
			w.Duration, w.MaxRequests = o.warmup, 0
			w.run(ctx)
		}
	}
}

// measureIdle records what each server spends in a second with no
// request at all: background work (timers, samplers, the runtime),
// counted into its CPU per request.
func (h *hitRun) measureIdle(ctx context.Context) error {
	h.idle = time.Second
	before := make([]childStats, len(h.sides))
	for i, sd := range h.sides {
		var err error
		if before[i], err = sd.child.stats(ctx); err != nil {
			return err
		}
	}
	time.Sleep(h.idle)
	for i, sd := range h.sides {
		after, err := sd.child.stats(ctx)
		if err != nil {
			return err
		}
		sd.idleCPU = after.CPU - before[i].CPU
	}
	return nil
}

// runRounds runs the rounds, each side once a round, the order turning.
func (h *hitRun) runRounds(ctx context.Context) error {
	for round := range h.rounds {
		for k := range h.sides {
			sd := h.sides[(k+round)%len(h.sides)]
			profile := round == 0 && sd == h.gw && h.o.cpuProfile != ""
			if err := h.runRound(ctx, sd, profile); err != nil {
				return err
			}
		}
	}
	return nil
}

// runRound runs one round of sd, with the server's CPU profile when
// profile is set.
func (h *hitRun) runRound(ctx context.Context, sd *hitSide, profile bool) error {
	if profile {
		if err := sd.child.profile(ctx, h.o.cpuProfile); err != nil {
			return err
		}
	}
	before, err := sd.child.stats(ctx)
	if err != nil {
		return err
	}
	r := sd.load.run(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	after, err := sd.child.stats(ctx)
	if err != nil {
		return err
	}
	if profile {
		if err := sd.child.profile(ctx, ""); err != nil {
			return err
		}
	}
	sd.total.add(r)
	sd.rounds = append(sd.rounds, hitRound{requests: r.Requests, serverCPU: after.CPU - before.CPU,
		allocs: after.Allocs - before.Allocs, allocBytes: after.AllocBytes - before.AllocBytes})
	return nil
}

// print prints a row per side, the details, the idle CPU and the ratios
// of server CPU per request.
func (h *hitRun) print() {
	o, sides := h.o, h.sides
	const row = "%-10s %9s %9s %11s %9s %9s %10s %9s %9s %7s  %s\n"
	fmt.Fprintf(o.out, row, "", "requests", "req/s", "server-cpu", "allocs", "bytes", "client-cpu", "p50", "p99", "errors", "statuses")
	fmt.Fprintf(o.out, row, "", "", "", "/req (med)", "/req", "/req", "/req", "", "", "", "")
	for _, sd := range sides {
		var allocs, bytes uint64
		for _, rd := range sd.rounds {
			allocs += rd.allocs
			bytes += rd.allocBytes
		}
		n := max(uint64(sd.total.Requests), 1)
		fmt.Fprintf(o.out, row, sd.label,
			strconv.FormatInt(sd.total.Requests, 10), strconv.FormatFloat(sd.total.rate(), 'f', 0, 64),
			fmtDur(median(cpusOf(sd))), strconv.FormatFloat(float64(allocs)/float64(n), 'f', 1, 64),
			strconv.FormatUint(bytes/n, 10), fmtDur(sd.total.cpuPerRequest()),
			fmtDur(sd.total.Hist.quantile(0.50)), fmtDur(sd.total.Hist.quantile(0.99)),
			strconv.FormatInt(sd.total.Errors, 10), fmtCounts(sd.total.Status))
	}
	for _, sd := range sides {
		printDetails(o.out, sd.label, sd.total)
	}
	fmt.Fprintf(o.out, "  idle CPU in %v without requests:", h.idle)
	for _, sd := range sides {
		fmt.Fprintf(o.out, " %s %s;", sd.label, fmtDur(sd.idleCPU))
	}
	fmt.Fprintln(o.out)
	h.printRatios()
}

// printRatios prints, for pairs of sides, the ratio of their server CPU
// per request within each round: median, min and max.
func (h *hitRun) printRatios() {
	o := h.o
	byLabel := map[string]*hitSide{}
	for _, sd := range h.sides {
		byLabel[sd.label] = sd
	}
	fmt.Fprintf(o.out, "server CPU per request, ratio within each round: median [min, max] of %d rounds\n", h.rounds)
	for _, p := range [][2]string{{"gateway", "bare-hmac"}, {"gw-nolog", "bare-hmac"}, {"gateway", "gw-nolog"}, {"bare-hmac", "bare"}, {"gateway", "bare"}, {"gw-bulk", "gateway"}, {"gw-tls", "gateway"}, {"gw-trace0", "gateway"}, {"gw-trace1%", "gateway"}, {"gw-trace100", "gateway"}} {
		a, b := byLabel[p[0]], byLabel[p[1]]
		if a == nil || b == nil {
			continue
		}
		var rs []float64
		for i := range a.rounds {
			if cb := b.rounds[i].cpuPerRequest(); cb > 0 {
				rs = append(rs, float64(a.rounds[i].cpuPerRequest())/float64(cb))
			}
		}
		if len(rs) == 0 {
			continue
		}
		med := medianF(rs)
		fmt.Fprintf(o.out, "  %-9s / %-9s %.3f [%.3f, %.3f]  (%s per request)\n", p[0], p[1], med, slices.Min(rs), slices.Max(rs),
			diff(median(cpusOf(a)), median(cpusOf(b))))
	}
}

func cpusOf(sd *hitSide) []time.Duration {
	out := make([]time.Duration, len(sd.rounds))
	for i, rd := range sd.rounds {
		out[i] = rd.cpuPerRequest()
	}
	return out
}
