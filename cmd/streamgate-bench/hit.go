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
	ttl := o.latestTTL
	if ttl == 0 {
		ttl = time.Hour
	}
	if !o.set["rounds"] {
		o.rounds = 5
	}
	rounds := max(o.rounds, 1)
	serverCPU, pinned := "", ""
	if _, err := exec.LookPath("taskset"); err == nil && runtime.NumCPU() >= 2 && o.pin {
		serverCPU = "0"
		if err := exec.Command("taskset", "-a", "-p", "-c", "1", strconv.Itoa(os.Getpid())).Run(); err != nil {
			return fmt.Errorf("pinning the client to CPU 1: %w", err)
		}
		pinned = "servers pinned to CPU 0, this client (all its threads) to CPU 1, by taskset"
	} else {
		pinned = "not pinned (no taskset, fewer than 2 CPUs, or -pin=false): other work on the machine is counted to no side, but shares the CPUs"
	}

	var sides []*hitSide
	var sink *httptest.Server // the collector stand-in of -tracing, closed after the gateways
	defer func() {
		for _, sd := range sides {
			if !sd.shared {
				sd.child.stop()
			}
		}
		if sink != nil {
			sink.Close()
		}
	}()
	start := func(label, role, desc string, setup childSetup) (*hitSide, error) {
		c, err := startChild(ctx, role, setup, serverCPU)
		if err != nil {
			return nil, err
		}
		sd := &hitSide{label: label, desc: desc, child: c, total: newResult()}
		sides = append(sides, sd)
		return sd, nil
	}
	gw, err := start("gateway", "gateway", "streamgate, access log "+o.logLevel,
		childSetup{Conc: o.conc, LogLevel: o.logLevel, LatestTTL: ttl, Streams: o.streams})
	if err != nil {
		return err
	}
	if o.logLevel != "off" {
		if _, err := start("gw-nolog", "gateway", "streamgate, access log off",
			childSetup{Conc: o.conc, LogLevel: "off", LatestTTL: ttl, Streams: o.streams}); err != nil {
			return err
		}
	}
	client, st := newClient(o.conc), newStamps()
	if o.hitTLS {
		files, pool, err := benchCert()
		if err != nil {
			return err
		}
		defer os.RemoveAll(files.dir)
		// HTTP/1.1 on both sides, so that the difference is TLS alone.
		client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}
		if _, err := start("gw-tls", "gateway", "streamgate over TLS 1.3 (HTTP/1.1, kept-alive connections), access log "+o.logLevel,
			childSetup{Conc: o.conc, LogLevel: o.logLevel, LatestTTL: ttl, Streams: o.streams, TLSCert: files.cert, TLSKey: files.key}); err != nil {
			return err
		}
	}
	if o.hitTracing {
		sink = otlpSink()
		for _, r := range []struct {
			label string
			ratio float64
		}{{"gw-trace0", 0}, {"gw-trace1%", 0.01}, {"gw-trace100", 1}} {
			if _, err := start(r.label, "gateway", fmt.Sprintf("streamgate tracing at sample_ratio %v (OTLP/HTTP), access log %s", r.ratio, o.logLevel),
				childSetup{Conc: o.conc, LogLevel: o.logLevel, LatestTTL: ttl, Streams: o.streams, Traces: sink.URL, Ratio: r.ratio}); err != nil {
				return err
			}
		}
	}
	feeds := gw.child.ready.Feeds
	keys := make([]key, o.conc)
	for i := range keys {
		id, secret := benchKey("c", i)
		keys[i] = key{ID: id, Secret: []byte(secret)}
	}
	// Fill each gateway's cache, then record each stream's answer, a hit,
	// for the bare servers (Date and Content-Length are the server's own).
	targets := make([]string, len(feeds))
	for i, f := range feeds {
		targets[i] = latestTarget(f)
	}
	answers := map[string]*childAnswer{}
	for _, sd := range sides {
		for _, t := range targets {
			if _, err := get(ctx, client, st, &keys[0], sd.child.ready.URL, t); err != nil {
				return err
			}
		}
		for _, t := range targets {
			var a *answer
			for try := 0; ; try++ { // the cache's writes are asynchronous
				if a, err = get(ctx, client, st, &keys[0], sd.child.ready.URL, t); err != nil {
					return err
				}
				if a.status == http.StatusOK && a.header.Get("X-Cache") == "HIT" || try == 50 {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if a.status != http.StatusOK || a.header.Get("X-Cache") != "HIT" {
				return fmt.Errorf("warming %s: status %d, X-Cache %q: %.200s", t, a.status, a.header.Get("X-Cache"), a.body)
			}
			a.header.Del("Date")
			a.header.Del("Content-Length")
			answers[t] = &childAnswer{Status: a.status, Header: a.header, Body: a.body}
		}
	}
	if _, err := start("bare-hmac", "bare-hmac", "net/http (the gateway's server timeouts), verifies the signature, sends the recorded answer",
		childSetup{Conc: o.conc, Answers: answers}); err != nil {
		return err
	}
	if _, err := start("bare", "bare", "net/http (the gateway's server timeouts), sends the recorded answer",
		childSetup{Conc: o.conc, Answers: answers}); err != nil {
		return err
	}

	if n := o.hitBulk; n > 0 {
		// Bulk requests of n of the streams at one timestamp, all cached
		// once the first has been answered, on the first gateway.
		if n > len(feeds) {
			return fmt.Errorf("-hit-bulk %d: only %d streams (-streams)", n, len(feeds))
		}
		target := bulkTarget(feeds[:n], time.Now().Add(-time.Hour).Unix())
		for try := 0; ; try++ {
			a, err := get(ctx, client, st, &keys[0], gw.child.ready.URL, target)
			if err != nil {
				return err
			}
			if a.status == http.StatusOK && a.header.Get("X-Cache") == "HIT" {
				break
			}
			if try == 50 {
				return fmt.Errorf("warming %s: status %d, X-Cache %q", target, a.status, a.header.Get("X-Cache"))
			}
			time.Sleep(20 * time.Millisecond)
		}
		sides = append(sides, &hitSide{label: "gw-bulk", desc: fmt.Sprintf("streamgate (the gateway above), bulk of %d streams, every one cached", n),
			child: gw.child, total: newResult(), shared: true,
			next: func(int64, int, *rand.Rand) call { return call{Target: target} }})
	}
	next := func(i int64, _ int, _ *rand.Rand) call { return call{Target: targets[i%int64(len(targets))]} }
	fmt.Fprintf(o.out, "hit: GET /api/v1/reports/latest over %d streams, latest_ttl %v (every answer a cache hit), %d clients, %d rounds of %v per side; team rate and daily quota on (never refusing), replay protection on\n",
		len(feeds), ttl, o.conc, rounds, o.dur/time.Duration(rounds))
	fmt.Fprintf(o.out, "  %s; server GOMAXPROCS %d\n", pinned, gw.child.ready.Procs)
	for _, sd := range sides {
		fmt.Fprintf(o.out, "  %-9s %s\n", sd.label, sd.desc)
		if sd.next == nil {
			sd.next = next
		}
		sd.load = o.newLoad(client, sd.child.ready.URL, keys, st, sd.next)
		sd.load.Duration = max(o.dur/time.Duration(rounds), time.Millisecond)
		if o.maxRequests > 0 {
			sd.load.MaxRequests = max(o.maxRequests/int64(rounds), 1)
		}
		if o.warmup > 0 {
			w := *sd.load
			w.Duration, w.MaxRequests = o.warmup, 0
			w.run(ctx)
		}
	}
	// What each server spends with no request at all: background work
	// (timers, samplers, the runtime), counted into its CPU per request.
	idle := time.Second
	before := make([]childStats, len(sides))
	for i, sd := range sides {
		if before[i], err = sd.child.stats(ctx); err != nil {
			return err
		}
	}
	time.Sleep(idle)
	for i, sd := range sides {
		after, err := sd.child.stats(ctx)
		if err != nil {
			return err
		}
		sd.idleCPU = after.CPU - before[i].CPU
	}
	for round := range rounds {
		for k := range sides {
			sd := sides[(k+round)%len(sides)]
			profile := round == 0 && sd == gw && o.cpuProfile != ""
			if profile {
				if err := sd.child.profile(ctx, o.cpuProfile); err != nil {
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
		}
	}

	const row = "%-10s %9s %9s %11s %9s %9s %10s %9s %9s %7s  %s\n"
	fmt.Fprintf(o.out, row, "", "requests", "req/s", "server-cpu", "allocs", "bytes", "client-cpu", "p50", "p99", "errors", "statuses")
	fmt.Fprintf(o.out, row, "", "", "", "/req (med)", "/req", "/req", "/req", "", "", "", "")
	for _, sd := range sides {
		var cpus []time.Duration
		var allocs, bytes uint64
		for _, rd := range sd.rounds {
			cpus = append(cpus, rd.cpuPerRequest())
			allocs += rd.allocs
			bytes += rd.allocBytes
		}
		n := max(uint64(sd.total.Requests), 1)
		fmt.Fprintf(o.out, row, sd.label,
			strconv.FormatInt(sd.total.Requests, 10), strconv.FormatFloat(sd.total.rate(), 'f', 0, 64),
			fmtDur(median(cpus)), strconv.FormatFloat(float64(allocs)/float64(n), 'f', 1, 64),
			strconv.FormatUint(bytes/n, 10), fmtDur(sd.total.cpuPerRequest()),
			fmtDur(sd.total.Hist.quantile(0.50)), fmtDur(sd.total.Hist.quantile(0.99)),
			strconv.FormatInt(sd.total.Errors, 10), fmtCounts(sd.total.Status))
	}
	for _, sd := range sides {
		printDetails(o.out, sd.label, sd.total)
	}
	fmt.Fprintf(o.out, "  idle CPU in %v without requests:", idle)
	for _, sd := range sides {
		fmt.Fprintf(o.out, " %s %s;", sd.label, fmtDur(sd.idleCPU))
	}
	fmt.Fprintln(o.out)
	byLabel := map[string]*hitSide{}
	for _, sd := range sides {
		byLabel[sd.label] = sd
	}
	fmt.Fprintf(o.out, "server CPU per request, ratio within each round: median [min, max] of %d rounds\n", rounds)
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
	return nil
}

func cpusOf(sd *hitSide) []time.Duration {
	out := make([]time.Duration, len(sd.rounds))
	for i, rd := range sd.rounds {
		out[i] = rd.cpuPerRequest()
	}
	return out
}
