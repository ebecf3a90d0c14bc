package realtime

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/feedid"
	"streamgate/upstreamsim"
)

// report returns the simulator's report of feed at ts as a stream frame
// (the REST answer's body, {"report":{…}}).
func (e *env) report(ctx context.Context, feed feedid.ID, ts int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/api/v1/reports?feedID="+string(feed)+"&timestamp="+strconv.FormatInt(ts, 10), nil)
	if err != nil {
		return nil, err
	}
	auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), e.clk.Now())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("report at %d: %d", ts, resp.StatusCode)
	}
	return b, nil
}

// TestResumeReadsTheArchive: a consumer resumed on a hub that does not
// carry its feed gets what it missed from the archive first
// (Config.Archive, read once as a range): the reports it holds, none at
// the second its coverage says the upstream has none of, and the second
// outside its coverage that it does not hold fetched from the upstream;
// no other second the archive answered for is fetched. Every second once,
// in order, then live ones; counted as read from the archive.
func TestResumeReadsTheArchive(t *testing.T) {
	e := newEnv(t, nil)
	feed := e.crypto(t, 1)[0]
	var mu sync.Mutex
	var fetched []int64 // the seconds asked of the upstream
	var calls atomic.Int64
	rest := e.restBackfill(&calls)
	var lo, hi atomic.Int64 // the range the archive was asked for
	const span = 30         // the archive holds the first 30 seconds of it
	var reads atomic.Int64
	metrics := NewMetrics(nil)
	h := e.hub(t, func(c *Config) {
		c.BackfillMax, c.History, c.Metrics = time.Minute, time.Minute, metrics
		c.Backfill = BackfillFunc(func(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
			mu.Lock()
			fetched = append(fetched, ts)
			mu.Unlock()
			return rest(ctx, feeds, ts)
		})
		c.Archive = func(ctx context.Context, f feedid.ID, from, to int64) ([][]byte, []ArchiveSpan, error) {
			reads.Add(1)
			lo.Store(from)
			hi.Store(to)
			var frames [][]byte
			for s := from; s < from+span && s <= to; s++ {
				if s == from+9 || s == from+19 {
					continue // +9: no report upstream (covered); +19: not held, not covered
				}
				b, err := e.report(ctx, f, s)
				if err != nil {
					return frames, nil, err
				}
				frames = append(frames, b)
			}
			return frames, []ArchiveSpan{{from, from + 18}, {from + 20, from + span - 1}}, nil
		}
	})
	e.run(t, 25*time.Millisecond)
	now := e.clk.Now().Unix()
	mark := now - 60
	c := collect(t, subscribe(t, h, []feedid.ID{feed}, SubscribeOptions{Queue: 4096, From: map[feedid.ID]int64{feed: mark}}))
	require.Eventually(t, func() bool {
		fs := c.of(feed)
		return len(fs) > 0 && fs[len(fs)-1].ts >= now+5
	}, wait, 10*time.Millisecond, "live seconds after the replay")
	first, last := lo.Load(), lo.Load()+span-1
	assert.Equal(t, mark+1, first, "the archive is asked from the second after the watermark")
	fs := c.of(feed)
	require.NotEmpty(t, fs)
	assert.Equal(t, mark+1, fs[0].ts, "resumed right after the watermark")
	want := mark + 1
	for _, f := range fs {
		if want == first+9 {
			want++ // the upstream has none there: the archive's coverage says so
		}
		require.Equal(t, want, f.ts, "every second once, in order: %v", fs)
		want++
	}
	mu.Lock()
	defer mu.Unlock()
	var asked []int64
	for _, s := range fetched {
		if s <= last {
			asked = append(asked, s)
		}
	}
	assert.Equal(t, []int64{first + 19}, asked, "of the archive's range, only the second it neither holds nor covers is fetched")
	assert.Equal(t, int64(1), reads.Load(), "the archive is read once, as a range")
	assert.Equal(t, float64(span-2), testutil.ToFloat64(metrics.archived.WithLabelValues("mainnet")), "the seconds read from the archive")
}
