package realtime

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/internal/testing/redistest"
)

// TestFrameFromTheFutureIsDropped: a report frame dated a day ahead, as a
// faulty upstream or replica might send on the sharing channel, is dropped
// (and counted) rather than taken as the feed's watermark: the feed's
// reports go on reaching every replica's subscribers.
func TestFrameFromTheFutureIsDropped(t *testing.T) {
	e := newEnv(t, nil)
	rs := redistest.New(t)
	feeds := e.crypto(t, 1)
	hubs, cols, clients := replicas(t, e, rs, 2, feeds)
	e.run(t, 20*time.Millisecond)
	awaitMore(t, cols, feeds[0], 3)

	// The newest real frame, re-dated a day ahead, published as another
	// replica's frame.
	last := cols[0].of(feeds[0])
	real := last[len(last)-1]
	ahead := real.ts + 86400
	forged := bytes.Replace(real.data, []byte(`"observationsTimestamp":`+strconv.FormatInt(real.ts, 10)),
		[]byte(`"observationsTimestamp":`+strconv.FormatInt(ahead, 10)), 1)
	require.NotEqual(t, real.data, forged)
	msg := append([]byte("sg1 F 1/0 forger 1\n"), forged...)
	require.NoError(t, clients[0].SPublish(context.Background(), "streamgate:ws:v2:{mainnet}:frames", msg).Err())

	awaitMore(t, cols, feeds[0], 3)
	for i, c := range cols {
		for _, f := range c.of(feeds[0]) {
			assert.Less(t, f.ts, ahead, "replica %d delivered the frame from the future", i)
		}
	}
	require.Eventually(t, func() bool {
		n := 0.0
		for _, h := range hubs {
			n += testutil.ToFloat64(h.mx.m.future.WithLabelValues("mainnet"))
		}
		return n >= 1
	}, wait, 10*time.Millisecond, "counted")
}
