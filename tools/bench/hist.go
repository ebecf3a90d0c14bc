package main

import (
	"math/bits"
	"slices"
	"time"
)

// histogram counts durations in fixed memory. Below 128 ns each nanosecond
// has its bucket; above, every power of two is cut into 64 equal buckets, so
// a quantile read from it is within 1/64 (1.6 %) of the true value whatever
// the number of samples (the idea of HdrHistogram). It is not safe for
// concurrent use: each worker keeps its own and they are merged at the end.
type histogram struct {
	counts   [histBuckets]uint64
	n        uint64
	sum, max time.Duration
	min      time.Duration
}

const (
	histLinear  = 128 // values below are exact
	histSub     = 64  // buckets per power of two above
	histBuckets = histLinear + (64-7)*histSub
)

func histIndex(v uint64) int {
	if v < histLinear {
		return int(v)
	}
	shift := bits.Len64(v) - 7 // v>>shift is in [64, 128)
	return histLinear + (shift-1)*histSub + int(v>>shift) - histSub
}

// histValue is the middle of bucket i.
func histValue(i int) uint64 {
	if i < histLinear {
		return uint64(i)
	}
	shift := (i-histLinear)/histSub + 1
	sub := uint64((i-histLinear)%histSub + histSub)
	lo := sub << shift
	return lo + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[histIndex(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the value below which a fraction q of the samples lie;
// 0 when there are none. The top quantile is the exact maximum.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q >= 1 {
		return h.max
	}
	rank := uint64(q*float64(h.n) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return min(time.Duration(histValue(i)), h.max)
		}
	}
	return h.max
}

func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianF(fs []float64) float64 {
	s := slices.Clone(fs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
