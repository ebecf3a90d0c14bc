package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"streamgate/internal/testing/fleet"
	"streamgate/internal/testing/redisproc"
	"streamgate/redisconn"
)

// The Redis modes of the replicas scenario (-redis-mode).
const (
	redisSingle   = fleet.RedisSingle
	redisSentinel = fleet.RedisSentinel
	redisCluster  = fleet.RedisCluster
)

var redisModes = fleet.RedisModes

// parseRedisModes reads -redis-mode: single, sentinel, cluster, a
// comma-separated list of them, or all.
func parseRedisModes(s string) ([]string, error) {
	modes, err := fleet.ParseRedisModes(s)
	if err != nil {
		return nil, fmt.Errorf("-redis-mode: %w", err)
	}
	return modes, nil
}

// modeRedis is the Redis of one mode of a run and an admin client of it.
type modeRedis struct{ *fleet.Redis }

// startModeRedis starts the Redis of mode for the run (fleet.StartRedis):
// for single -redis if given, else a redis-server from PATH on a free
// loopback port; for sentinel a master, a replica and three sentinels;
// for cluster three masters with a replica each. Every server listens on
// loopback and keeps nothing on disk.
func startModeRedis(o *options, mode string) (*modeRedis, error) {
	url := ""
	if mode == redisSingle {
		url = o.redis
		if _, err := redisproc.LookPath("redis-server"); url == "" && err != nil {
			return nil, errors.New("this scenario needs Redis: give -redis URL, or install redis-server")
		}
	}
	r, err := fleet.StartRedis(mode, url)
	if err != nil {
		return nil, fmt.Errorf("-redis-mode %s: %w", mode, err)
	}
	if url != "" {
		r.What = "the Redis of -redis"
	}
	return &modeRedis{r}, nil
}

// flush empties every master.
func (r *modeRedis) flush(ctx context.Context) error { return r.Flush(ctx) }

// cpu is the CPU time the masters have used since they started:
// used_cpu_sys + used_cpu_user of INFO cpu, summed over the masters.
func (r *modeRedis) cpu(ctx context.Context) (time.Duration, error) {
	var mu sync.Mutex
	var sum float64
	err := r.EachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "cpu").Result()
		if err != nil {
			return err
		}
		secs, err := infoCPU(info)
		if err != nil {
			return err
		}
		mu.Lock()
		sum += secs
		mu.Unlock()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("redis: info cpu: %w", err)
	}
	return time.Duration(sum * float64(time.Second)), nil
}

// infoCPU reads used_cpu_sys + used_cpu_user, in seconds, from an INFO
// cpu answer.
func infoCPU(info string) (float64, error) {
	var sum float64
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("info cpu: %s: %w", name, err)
		}
		sum += v
		found++
	}
	if found != 2 {
		return 0, errors.New("info cpu: no used_cpu_sys and used_cpu_user")
	}
	return sum, nil
}

// redisCost is what one run of the replicas scenario cost Redis: the
// gateways' Redis calls and commands (their streamgate_redis_* counters,
// every client of every replica) and the masters' CPU time, over the
// measured load.
type redisCost struct {
	mode       string
	n          int     // replicas
	requests   int64   // answered in the run
	rate       float64 // requests per second
	roundTrips float64
	commands   float64
	cpu        time.Duration
	p50, p99   time.Duration

	rtLimit, rtShared float64 // round trips of the clients "ratelimit" and "shared"

	rt0, cmd0, rtLimit0, rtShared0 float64
	cpu0                           time.Duration
}

// begin checks that every Redis client of the replicas runs in mode (their
// streamgate_redis_mode) and reads the counters before the load.
func (r *modeRedis) begin(ctx context.Context, mode string, n int, reps *replicaSet) (*redisCost, error) {
	if in, all := reps.sum(redisconn.MetricMode, "mode", mode), reps.sum(redisconn.MetricMode, "", ""); in == 0 || in != all {
		return nil, fmt.Errorf("redis: %v of the replicas' %v Redis clients run in mode %s", in, all, mode)
	}
	c := &redisCost{mode: mode, n: n,
		rt0:       reps.sum(redisconn.MetricRoundTrips, "", ""),
		cmd0:      reps.sum(redisconn.MetricCommands, "", ""),
		rtLimit0:  reps.sum(redisconn.MetricRoundTrips, "client", "ratelimit"),
		rtShared0: reps.sum(redisconn.MetricRoundTrips, "client", "shared")}
	var err error
	if c.cpu0, err = r.cpu(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// end reads the counters after the load res.
func (c *redisCost) end(ctx context.Context, r *modeRedis, reps *replicaSet, res *result) error {
	cpu, err := r.cpu(ctx)
	if err != nil {
		return err
	}
	c.cpu = cpu - c.cpu0
	c.roundTrips = reps.sum(redisconn.MetricRoundTrips, "", "") - c.rt0
	c.commands = reps.sum(redisconn.MetricCommands, "", "") - c.cmd0
	c.rtLimit = reps.sum(redisconn.MetricRoundTrips, "client", "ratelimit") - c.rtLimit0
	c.rtShared = reps.sum(redisconn.MetricRoundTrips, "client", "shared") - c.rtShared0
	c.requests, c.rate = res.Requests, res.rate()
	c.p50, c.p99 = res.Hist.quantile(0.5), res.Hist.quantile(0.99)
	return nil
}

// perRequest is v divided by the requests, "-" without requests.
func (c redisCost) perRequest(v float64) string {
	if c.requests == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/float64(c.requests))
}

// hitCost is the hit latency part of one mode's run: the p99 of a report
// read at a replica that finds it in Redis, in its memory, and of the
// shared tier's lookup alone.
type hitCost struct {
	mode                          string
	fromRedis, fromMemory, lookup time.Duration
}

// printRedisCosts prints the Redis cost of every run, the modes side by
// side, with the p99 each mode adds to single mode's run of as many
// replicas in this invocation; then the hit latency's p99 by mode.
func printRedisCosts(o *options, costs []redisCost, hits []hitCost) {
	fmt.Fprintf(o.out, "\nRedis per request, by mode (round trips and commands: the replicas' %s and %s over the measured run, "+
		"the round trips also by client, ratelimit and shared; Redis CPU: INFO cpu used_cpu_sys+used_cpu_user summed over the masters; "+
		"added p99: against single mode's run of as many replicas)\n", redisconn.MetricRoundTrips, redisconn.MetricCommands)
	fmt.Fprintf(o.out, "%-9s %8s %9s %8s %12s %10s %8s %9s %16s %9s %9s %10s\n", "mode", "replicas", "requests", "req/s",
		"round trips", "ratelimit", "shared", "commands", "CPU ms/1000 req", "p50", "p99", "added p99")
	single := map[int]redisCost{}
	for _, c := range costs {
		if c.mode == redisSingle {
			single[c.n] = c
		}
	}
	for _, c := range costs {
		cpu := "-"
		if c.requests > 0 {
			cpu = fmt.Sprintf("%.1f", float64(c.cpu)/float64(time.Millisecond)*1000/float64(c.requests))
		}
		added := "-"
		if s, ok := single[c.n]; ok && c.mode != redisSingle {
			added = diff(c.p99, s.p99)
		}
		fmt.Fprintf(o.out, "%-9s %8d %9d %8.0f %12s %10s %8s %9s %16s %9s %9s %10s\n", c.mode, c.n, c.requests, c.rate,
			c.perRequest(c.roundTrips), c.perRequest(c.rtLimit), c.perRequest(c.rtShared), c.perRequest(c.commands),
			cpu, fmtDur(c.p50), fmtDur(c.p99), added)
	}
	var base *hitCost
	for i := range hits {
		if hits[i].mode == redisSingle {
			base = &hits[i]
		}
	}
	fmt.Fprintf(o.out, "\nhit latency p99 by mode (a report read one at a time; added: against single mode's)\n")
	fmt.Fprintf(o.out, "%-9s %12s %12s %12s %14s %14s\n", "mode", "from Redis", "from memory", "lookup alone", "added (Redis)", "added (lookup)")
	for _, h := range hits {
		addRedis, addLookup := "-", "-"
		if base != nil && h.mode != redisSingle {
			addRedis, addLookup = diff(h.fromRedis, base.fromRedis), diff(h.lookup, base.lookup)
		}
		fmt.Fprintf(o.out, "%-9s %12s %12s %12s %14s %14s\n", h.mode, fmtDur(h.fromRedis), fmtDur(h.fromMemory), fmtDur(h.lookup), addRedis, addLookup)
	}
}
