package realtime

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
	"streamgate/realtime/share"
	"streamgate/redisconn"
)

// BenchmarkShareReplicas measures what the upstream sees and what the
// subscriptions get for 1, 2 and 3 replicas wanting the same 10 feeds (3
// per connection, at most 4 connections each), each replica holding its
// own connections or sharing them through one redis-server: the upstream
// WebSocket connections open once settled, and the frames delivered over
// 100 simulated seconds against those expected (every replica, every
// feed, every second). The simulator's clock moves one second every
// 10 ms. Run with -bench ShareReplicas -benchtime 1x.
func BenchmarkShareReplicas(b *testing.B) {
	const feedsN, seconds = 10, 100
	for _, shared := range []bool{false, true} {
		for replicasN := 1; replicasN <= 3; replicasN++ {
			b.Run(fmt.Sprintf("shared=%t/replicas=%d", shared, replicasN), func(b *testing.B) {
				for b.Loop() {
					conns, delivered, expected := shareRun(b, shared, replicasN, feedsN, seconds)
					b.ReportMetric(float64(conns), "upstream-conns")
					b.ReportMetric(float64(delivered)/float64(expected), "delivered/expected")
				}
			})
		}
	}
}

func shareRun(b *testing.B, shared bool, replicasN, feedsN, seconds int) (conns int64, delivered, expected int) {
	e := newEnv(b, nil)
	var rs *redistest.Server
	if shared {
		rs = redistest.New(b)
	}
	feeds := e.crypto(b, feedsN)
	cols := make([]*collector, replicasN)
	hubs := make([]*Hub, replicasN)
	for i := range replicasN {
		h := e.hub(b, func(cfg *Config) {
			cfg.FeedsPerConnection, cfg.MaxConnections = 3, 5 // 4 chunks and room for a switch
			if shared {
				c, err := redisconn.NewURL(rs.URL(), "", redisconn.Options{})
				require.NoError(b, err)
				b.Cleanup(func() { c.Close() })
				cfg.Share = &share.Config{Client: c, Lease: shareLease, Replica: "r" + strconv.Itoa(i)}
			}
		})
		hubs[i] = h
		cols[i] = collect(b, subscribe(b, h, feeds, SubscribeOptions{Queue: 1024}))
	}
	want := int64(4 * replicasN)
	if shared {
		want = 4
	}
	// Settled: the connections expected are open, and every subscription
	// has had a frame of every feed.
	e.run(b, 10*time.Millisecond)
	settledOK := func() bool {
		if e.open() != want {
			return false
		}
		for _, c := range cols {
			for _, f := range feeds {
				if c.count(f) == 0 {
					return false
				}
			}
		}
		return true
	}
	if !eventually(settledOK, 30*time.Second) {
		counts := ""
		for _, c := range cols {
			for _, f := range feeds {
				counts += fmt.Sprint(c.count(f), " ")
			}
			counts += "| "
		}
		b.Fatalf("not settled: %d upstream connections open, want %d; %s; %s", e.open(), want, dump(hubs), counts)
	}
	start := e.clk.Now().Unix() + 1
	end := start + int64(seconds)
	require.Eventually(b, func() bool {
		for _, c := range cols {
			for _, f := range feeds {
				fs := c.of(f)
				if len(fs) == 0 || fs[len(fs)-1].ts < end {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 5*time.Millisecond)
	conns = e.open()
	for _, c := range cols {
		for _, f := range feeds {
			increasing(b, c.of(f)) // no duplicate: delivered counts distinct reports
			for _, fr := range c.of(f) {
				if fr.ts >= start && fr.ts < end {
					delivered++
				}
			}
		}
	}
	return conns, delivered, replicasN * feedsN * seconds
}

func dump(hubs []*Hub) string {
	out := ""
	for _, h := range hubs {
		st := h.Stats()
		out += fmt.Sprintf("[conns %d sub %d unc %d share %+v] ", len(st.Connections), st.FeedsSubscribed, st.FeedsUncarried, st.Share)
	}
	return out
}

// eventually polls cond until it holds or d has passed.
func eventually(cond func() bool, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
