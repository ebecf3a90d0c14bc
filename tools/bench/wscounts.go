package main

// What the ws scenario counts beside CPU in its window, for the whole
// process (load tool's clients, server, simulator): the read and write
// system calls (Linux's /proc/self/io; none elsewhere) and the goroutine
// runs the scheduler sampled (/sched/latencies: one of every eight
// transitions to running is recorded, so the estimate is eight times
// its count). The clients' and the simulator's share is the same for the
// gateway and the bare server; the difference is theirs.

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
)

// schedSampling is the runtime's sampling of /sched/latencies: one in
// eight goroutine transitions to running.
const schedSampling = 8

// procCounts are the counters read at a window's start and end.
type procCounts struct {
	syscr, syscw int64 // read and write system calls; -1: unknown
	runs         int64 // goroutine runs, estimated
}

func readProcCounts() procCounts {
	c := procCounts{syscr: -1, syscw: -1}
	if b, err := os.ReadFile("/proc/self/io"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "syscr":
				c.syscr = n
			case "syscw":
				c.syscw = n
			}
		}
	}
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindFloat64Histogram {
		for _, n := range s[0].Value.Float64Histogram().Counts {
			c.runs += int64(n)
		}
		c.runs *= schedSampling
	}
	return c
}

// sub returns c minus the earlier b.
func (c procCounts) sub(b procCounts) procCounts {
	d := procCounts{syscr: -1, syscw: -1, runs: c.runs - b.runs}
	if c.syscr >= 0 && b.syscr >= 0 {
		d.syscr, d.syscw = c.syscr-b.syscr, c.syscw-b.syscw
	}
	return d
}
