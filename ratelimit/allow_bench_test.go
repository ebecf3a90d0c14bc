package ratelimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"streamgate/ratelimit"
)

// The limit checks of a gateway request, in memory, with metrics recorded
// as the gateway records them. BenchmarkMemoryAllow (package ratelimit)
// spreads parallel checks over 64 keys; these put every check on one key,
// the case of one busy team, where all goroutines meet on one bucket.

func benchOptions(b *testing.B, name string) ratelimit.Options {
	b.Helper()
	m, err := ratelimit.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	return ratelimit.Options{Name: name, Network: "mainnet", Metrics: m}
}

// BenchmarkMemoryAllowOneKey checks one team's bucket, with a rate high
// enough that every check is allowed, serially and in parallel; the
// "headers" case also writes the RateLimit headers as the gateway does.
func BenchmarkMemoryAllowOneKey(b *testing.B) {
	m, err := ratelimit.NewMemory(benchOptions(b, "team"))
	if err != nil {
		b.Fatal(err)
	}
	l := ratelimit.Limit{Rate: 1e9, Burst: 1 << 30}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if d, err := m.Allow(ctx, "team:trading", l); err != nil || !d.Allowed {
				b.Fatal("refused", err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, err := m.Allow(ctx, "team:trading", l); err != nil || !d.Allowed {
					b.Error("refused", err)
					return
				}
			}
		})
	})
	b.Run("headers", func(b *testing.B) {
		h := http.Header{}
		b.ReportAllocs()
		for b.Loop() {
			d, err := m.Allow(ctx, "team:trading", l)
			if err != nil || !d.Allowed {
				b.Fatal("refused", err)
			}
			d.SetHeaders(h, "team")
		}
	})
}

// BenchmarkMemoryQuotaTake takes from one team's daily quota.
func BenchmarkMemoryQuotaTake(b *testing.B) {
	q, err := ratelimit.NewMemoryQuota(benchOptions(b, "daily"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := q.Take(ctx, "daily:trading", 1<<62, now); err != nil || !d.Allowed {
				b.Error("refused", err)
				return
			}
		}
	})
}

// BenchmarkMemoryBudgetWait spends the upstream budget of one endpoint, as
// every upstream call does, with a rate that never makes it wait.
func BenchmarkMemoryBudgetWait(b *testing.B) {
	bu, err := ratelimit.NewMemoryBudget(benchOptions(b, "budget"))
	if err != nil {
		b.Fatal(err)
	}
	l := ratelimit.Limit{Rate: 1e9, Burst: 1 << 30}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := bu.Wait(ctx, "latest", l); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
