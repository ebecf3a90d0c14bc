package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"streamgate/config"
	"streamgate/upstreamsim"
)

// options are the parsed flags.
type options struct {
	scenario     string
	targets      []string
	keyID        string
	secret       string
	conc         int
	dur          time.Duration
	maxRequests  int64
	streams      int
	feeds        []string
	mix          mix
	bulk         int
	bulkCached   int
	teams        int
	latestTTL    time.Duration
	every        time.Duration
	warmup       time.Duration
	rounds       int
	logLevel     string
	cpuProfile   string
	pin          bool
	hitBulk      int
	hitTLS       bool
	hitTracing   bool
	control      string
	redis        string
	redisModes   []string
	rateModes    []upstreamsim.RateMode
	budgetRPS    float64
	budgetMargin time.Duration
	set          map[string]bool // flags given on the command line
	out          io.Writer
	profileStart func() error
	profileStop  func()
	// bareProfileStart and bareProfileStop profile the ws scenario's bare
	// fan-out server's window into cpuProfile+".bare".
	bareProfileStart func() error
	bareProfileStop  func()
}

// parseOptions reads the flags of args; the scenario writes to stdout,
// flag errors and the usage go to stderr.
func parseOptions(args []string, stdout, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("streamgate-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var targets, feeds, mixText, rateModes, redisMode string
	fs.StringVar(&o.scenario, "scenario", "", "hit, miss, latest-reduction, bulk-reduction, catalog-reduction, ws, ws-latest, freshness, replicas, continuity or load (default: load with -target, else hit)")
	fs.StringVar(&targets, "target", "", "base URL(s) of an external gateway, comma-separated; clients are spread over them (scenario load)")
	fs.StringVar(&o.keyID, "key", os.Getenv("STREAMGATE_KEY"), "key ID for -target (default $STREAMGATE_KEY)")
	fs.StringVar(&o.secret, "secret", "", "key secret for -target (default $STREAMGATE_SECRET)")
	fs.IntVar(&o.conc, "c", 50, "concurrent clients (latest-reduction, ws-latest: 200; ws, continuity: 1000 WebSocket clients; freshness: 50 and 200, or this with -streams)")
	fs.DurationVar(&o.dur, "d", 10*time.Second, "duration of each measured run (latest-reduction: 30s)")
	fs.Int64Var(&o.maxRequests, "n", 0, "most requests of each measured run; 0: no bound (bulk-reduction: 2000)")
	fs.IntVar(&o.streams, "streams", 20, "streams the requests spread over (continuity: 10; ws, ws-latest: 100; freshness: 30 and 100, or this with -c)")
	fs.StringVar(&feeds, "feeds", "", "stream IDs for -target, comma-separated (default: the first -streams of GET /api/v1/feeds)")
	fs.StringVar(&mixText, "mix", "latest=8,reports=1,bulk=1", "endpoint weights of scenario load: latest, reports, bulk, page, discovery, feeds")
	fs.IntVar(&o.bulk, "bulk", 20, "streams per bulk request")
	fs.IntVar(&o.bulkCached, "bulk-cached", 15, "bulk-reduction: streams of each bulk request already cached at its timestamp")
	fs.IntVar(&o.teams, "teams", 20, "catalog-reduction: teams, each with its own key")
	fs.DurationVar(&o.latestTTL, "latest-ttl", 0, "cache.latest_ttl of the in-process gateway (hit: 1h; else the default, 500ms)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured load before measuring each side (freshness: 5s)")
	fs.DurationVar(&o.every, "every", 100*time.Millisecond, "freshness: how often each client asks")
	fs.IntVar(&o.rounds, "rounds", 2, "hit (default 5), miss: alternating runs of each side, each -d/rounds long; ws (default 1): runs of each side, each -d long, the order turning, and their ratios within each round")
	fs.IntVar(&o.hitBulk, "hit-bulk", 0, "hit: also measure bulk requests of this many streams, every one cached, on the gateway; 0: not")
	fs.BoolVar(&o.hitTracing, "tracing", false, "hit: also measure gateways tracing at sample ratio 0, 0.01 and 1, exporting over OTLP/HTTP to a collector stand-in in this process that takes and drops the spans")
	fs.BoolVar(&o.hitTLS, "tls", false, "hit: also measure a gateway serving https (TLS 1.3, HTTP/1.1 on kept-alive connections, a certificate made for the run)")
	fs.BoolVar(&o.pin, "pin", true, "hit: pin the servers to CPU 0 and this client to CPU 1 with taskset, where there is taskset and two CPUs")
	fs.StringVar(&o.logLevel, "log", "info", "access log level of the in-process gateway (JSON, discarded), or off")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the gateway's measured run to this file (hit: the gateway process, first round; else the whole process; ws: the bare fan-out server's run to this file with .bare)")
	fs.StringVar(&o.control, "control", "", "load: control URL of a streams-sim behind the target, to count upstream calls")
	fs.StringVar(&o.redis, "redis", "", "replicas: URL of a Redis to use (it is flushed); default: a redis-server from PATH on a free loopback port")
	fs.StringVar(&redisMode, "redis-mode", redisSingle, "replicas: the Redis the replicas share: single (one redis-server), sentinel (a master, a replica and three sentinels), cluster (three masters with a replica each), a comma-separated list of them run one after the other, or all; given, the scenario also prints Redis round trips, commands and CPU per request and the p99 added to single mode's")
	fs.StringVar(&rateModes, "rate-mode", "bucket", "freshness: how the simulator counts its 10/s limit: bucket (burst 1, the strictest), calendar (per calendar second), sliding (in any one second), a comma-separated list of them, or all")
	fs.DurationVar(&o.budgetMargin, "budget-margin", config.DefaultBudgetMargin, "freshness: the gateway's budget_margin on both networks (positive)")
	fs.Float64Var(&o.budgetRPS, "budget-rps", 10, "freshness: the gateway's budget rps on both networks (the simulator allows 10/s; a higher value shows how the budget learns from 429s)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if !o.set["secret"] {
		o.secret = os.Getenv("STREAMGATE_SECRET")
	}
	o.targets = splitList(targets)
	o.feeds = splitList(feeds)
	o.out = stdout
	var err error
	if o.rateModes, err = parseRateModes(rateModes); err != nil {
		return nil, err
	}
	if o.redisModes, err = parseRedisModes(redisMode); err != nil {
		return nil, err
	}
	if !(o.budgetRPS > 0) {
		return nil, errors.New("-budget-rps must be positive")
	}
	if o.budgetMargin <= 0 {
		return nil, errors.New("-budget-margin must be positive")
	}
	if o.mix, err = parseMix(mixText); err != nil {
		return nil, err
	}
	if o.scenario == "" {
		o.scenario = "hit"
		if len(o.targets) > 0 {
			o.scenario = "load"
		}
	}
	if o.conc < 1 || o.dur <= 0 || o.streams < 1 || o.bulk < 1 || o.maxRequests < 0 {
		return nil, errors.New("-c, -d, -streams and -bulk must be positive, -n not negative")
	}
	o.profileStart, o.profileStop = profiler(o.cpuProfile)
	o.bareProfileStart, o.bareProfileStop = profiler("")
	if o.cpuProfile != "" {
		o.bareProfileStart, o.bareProfileStop = profiler(o.cpuProfile + ".bare")
	}
	return &o, nil
}
