package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

const rowHeader = "%-10s %9s %9s %9s %9s %9s %9s %9s %7s  %s\n"

func printHeader(w io.Writer) {
	fmt.Fprintf(w, rowHeader, "", "requests", "req/s", "cpu/req", "p50", "p90", "p99", "max", "errors", "statuses")
}

func printRow(w io.Writer, label string, r *result) {
	fmt.Fprintf(w, rowHeader, label,
		strconv.FormatInt(r.Requests, 10), strconv.FormatFloat(r.rate(), 'f', 0, 64), fmtDur(r.cpuPerRequest()),
		fmtDur(r.Hist.quantile(0.50)), fmtDur(r.Hist.quantile(0.90)), fmtDur(r.Hist.quantile(0.99)), fmtDur(r.Hist.max),
		strconv.FormatInt(r.Errors, 10), fmtCounts(r.Status))
}

// printDetails prints what a row has no room for: X-Cache values, errors,
// and a lead of the signing clock if any.
func printDetails(w io.Writer, label string, r *result) {
	if len(r.XCache) > 0 {
		fmt.Fprintf(w, "  %s X-Cache: %s\n", label, fmtCounts(r.XCache))
	}
	kinds := make([]string, 0, len(r.ErrKinds))
	for k := range r.ErrKinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "  %s errors %s: %d (first: %s)\n", label, k, r.ErrKinds[k], r.ErrFirst[k])
	}
	if r.Lead > 100*time.Millisecond {
		fmt.Fprintf(w, "  %s signing timestamps ran up to %v ahead of the clock (more than 1000 req/s on one target and key)\n", label, r.Lead)
	}
}

func fmtCounts[K int | string](m map[K]int64) string {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%v:%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// fmtDur prints a latency with about three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return strconv.FormatInt(int64(d), 10) + "ns"
	case d < time.Millisecond:
		return sig3(float64(d)/1e3) + "µs"
	case d < time.Second:
		return sig3(float64(d)/1e6) + "ms"
	}
	return sig3(d.Seconds()) + "s"
}

func sig3(v float64) string {
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// addCounts adds the counts of src to dst.
func addCounts[K comparable, V int | int64](dst, src map[K]V) {
	for k, v := range src {
		dst[k] += v
	}
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}

func diff(a, b time.Duration) string {
	d := a - b
	if d < 0 {
		return "-" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

// pct is a share in percent with enough digits for 0.1 %.
func pct(n, of int64) string {
	if of == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(100*float64(n)/float64(of), 'f', 2, 64)
}
