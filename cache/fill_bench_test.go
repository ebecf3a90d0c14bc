package cache_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"streamgate/cache"
)

// Benchmarks of what BenchmarkKeys, BenchmarkGetHit and BenchmarkLoadHit
// (package cache) leave out: the key of a bulk call, and the miss path of
// Load, where a fill runs, its entry is stored and made visible.

// BenchmarkBulkKey builds the flight key of a bulk call of n streams.
func BenchmarkBulkKey(b *testing.B) {
	for _, n := range []int{20, 100} {
		feeds := make([]string, n)
		for i := range feeds {
			feeds[i] = fmt.Sprintf("0x%064x", i)
		}
		b.Run("streams="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			var sink string
			for b.Loop() {
				sink = cache.BulkKey("mainnet", "", 1718885772, feeds)
			}
			_ = sink
		})
	}
}

// BenchmarkLoadMiss loads a key never seen before, with a fill that
// answers at once with a 1 KiB immutable entry: the cost of a flight
// (start, singleflight bookkeeping, store, wait until visible, retire)
// without any upstream.
func BenchmarkLoadMiss(b *testing.B) {
	s, err := cache.New(cache.Config{MaxBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	body := make([]byte, 1024)
	now := time.Now()
	fill := func(context.Context) (*cache.Entry, error) {
		return &cache.Entry{Status: 200, Body: body, Stored: now}, nil
	}
	ctx := context.Background()
	var seq atomic.Int64
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			key := cache.ReportKey("mainnet", "", "0x00", seq.Add(1))
			if _, out, err := s.Load(ctx, key, fill); err != nil || out != cache.Miss {
				b.Fatal(out, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := cache.ReportKey("mainnet", "", "0x00", seq.Add(1))
				if _, out, err := s.Load(ctx, key, fill); err != nil || out != cache.Miss {
					b.Error(out, err)
					return
				}
			}
		})
	})
}
