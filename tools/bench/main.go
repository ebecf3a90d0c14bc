// Command streamgate-bench is streamgate's load tool. It drives signed
// Data Streams requests, each signed afresh, from C concurrent keep-alive
// clients for a duration or a number of requests, and prints throughput,
// latency quantiles, status codes and transport errors.
//
// Every scenario but "load" is self-contained: it starts the simulator and
// a gateway wired as cmd/streamgate wires them (replicas: several, and a
// redis-server unless -redis names one, or with -redis-mode a Sentinel set
// or a Cluster), in this process, on loopback, and
// measures side by side in one run:
//
//	hit                the latest report, a pure cache hit, against bare net/http servers sending the same bytes, with and without verifying the signature; server CPU per request, each server in a process of its own
//	miss               reports at distinct timestamps (every one a miss) against the simulator called directly
//	latest-reduction   many clients polling latest: upstream calls against the ideal minimum
//	bulk-reduction     bulk requests with most streams cached: upstream calls and streams per request
//	catalog-reduction  many teams sending discovery filters: upstream fetches per catalog view
//	ws                 N WebSocket clients of 10 streams each: upstream connections, frames delivered, added delay, CPU and memory per client
//	ws-latest          clients polling latest of streams carried on the upstream WebSocket: upstream calls and answer age
//	freshness          clients polling latest at a fixed rate within the upstream's 10 rps limit: answers, latency, age of the data, upstream calls and 429s, stale-while-revalidate against the behaviour before it; -rate-mode bucket,calendar,sliding (or all) for how the simulator counts its limit, -budget-rps and -budget-margin for the gateway's budget
//	continuity         1000 WebSocket clients (a tenth in HA mode) over 3 replicas behind a readiness-aware balancer, through a rolling restart and an 8 s upstream outage: missing and repeated (stream, second) pairs, reconnect to live, the history's memory per stream; against resume and backfill off
//	replicas           one load spread over 1, 2 and 3 replicas sharing limits and the cache tier in one Redis: upstream calls by endpoint; the latency the shared tier adds to a hit; -redis-mode single,sentinel,cluster (or all) for the Redis shared, with Redis round trips, commands and CPU per request and the added p99 of each mode
//	load               a plain load on -target, an external gateway (the real binary)
//
// Each scenario is a file of its own (hit.go, miss.go, latest.go, bulk.go,
// catalog.go, ws.go, wslatest.go, freshness.go, replicas.go,
// continuity.go, load.go); options.go reads the flags, and the parts they
// share have files of their own (loadgen.go the load engine, stack.go the
// in-process gateway, format.go the output). The fleet, its Redis and the
// counting stream client are internal/testing/fleet's.
//
// Client and servers share this machine's CPUs, so absolute figures are
// the client's as much as the server's; the ratios of one run are the
// figures to compare.
//
//	go run ./tools/bench -scenario hit
//	go run ./tools/bench -target http://127.0.0.1:8080 -mix latest=8,reports=1,bulk=1
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
)

func main() {
	if role := os.Getenv(childEnv); role != "" {
		if err := runChild(role, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "streamgate-bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "streamgate-bench:", err)
		os.Exit(1)
	}
}

// scenarios are the load tool's commands, one file each.
var scenarios = map[string]func(context.Context, *options) error{
	"hit":               scenarioHit,
	"miss":              scenarioMiss,
	"latest-reduction":  scenarioLatest,
	"bulk-reduction":    scenarioBulk,
	"catalog-reduction": scenarioCatalog,
	"ws":                scenarioWS,
	"ws-latest":         scenarioWSLatest,
	"freshness":         scenarioFreshness,
	"load":              scenarioLoad,
	"replicas":          scenarioReplicas,
	"continuity":        scenarioContinuity,
}

// run parses the flags and runs the scenario they name.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stdout, stderr)
	if err != nil {
		return err
	}
	sc, ok := scenarios[o.scenario]
	if !ok {
		return fmt.Errorf("unknown -scenario %q", o.scenario)
	}
	if o.scenario != "load" && len(o.targets) > 0 {
		return fmt.Errorf("-target is for -scenario load; %s starts its own gateway", o.scenario)
	}
	fmt.Fprintf(o.out, "streamgate-bench %s: %s, %s/%s, GOMAXPROCS %d, %d CPUs (%s)\n",
		o.scenario, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU(), cpuModel())
	return sc(ctx, o)
}
