package wsgate

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A period's ping is taken once: with a batch when it is due within ride
// (and then the timer's firing does nothing), or when the timer fires,
// alone or with the next batch. The timer is driven by hand (its own run
// is an hour away).
func TestPingerPeriods(t *testing.T) {
	ctl := make(chan struct{}, 1)
	p := newPinger(time.Hour, ctl)
	defer p.stop()
	assert.Equal(t, time.Second, p.ride, "at most a second early")
	short := newPinger(80*time.Millisecond, make(chan struct{}, 1))
	short.stop()
	assert.Equal(t, 40*time.Millisecond, short.ride, "half a short interval")
	signalled := func() bool {
		select {
		case <-ctl:
			return true
		default:
			return false
		}
	}
	at := func(before time.Duration) time.Time { return time.Unix(0, p.next.Load()).Add(-before) }

	// Not due yet: nothing to take.
	assert.False(t, p.takeDue())
	assert.False(t, p.takeAhead(time.Now()), "an hour before the timer")
	assert.False(t, p.takeAhead(at(p.ride+time.Millisecond)), "just more than ride before it")

	// Due within ride: taken by the batch once; the timer then does nothing.
	assert.True(t, p.takeAhead(at(p.ride/2)))
	assert.False(t, p.takeAhead(at(p.ride/4)), "one ping a period")
	p.fire()
	assert.False(t, signalled(), "the period's ping went with a batch: no signal")
	assert.False(t, p.takeDue(), "nor a ping due")

	// A period without a batch in its last second: the timer makes it due,
	// and it is taken once, by the writer's signal or by the next batch.
	p.fire()
	assert.True(t, signalled(), "the writer is woken")
	assert.False(t, p.takeAhead(at(0)), "a due ping is not taken as one ahead")
	assert.True(t, p.takeDue())
	assert.False(t, p.takeDue(), "taken once")

	// The next period is an interval after the last firing.
	assert.WithinDuration(t, time.Now().Add(time.Hour), time.Unix(0, p.next.Load()), time.Minute)
	p.stop()
	p.fire()
	assert.False(t, signalled(), "a stopped pinger's late run does nothing")
}

// A batch with a ping is the batch's frames and then one empty ping, in one
// write, as a client reads them (a real socket over loopback).
func TestWriteBatchWithPing(t *testing.T) {
	conn, peer := loopbackPair(t)

	c := &wsConn{conn: conn}
	require.NoError(t, c.writeBatch([][]byte{[]byte("first"), bytes.Repeat([]byte{'x'}, 300)}, ws.OpBinary, true))
	require.NoError(t, c.writeBatch([][]byte{[]byte("then")}, ws.OpText, false))
	type frame struct {
		op      ws.OpCode
		payload string
	}
	var got []frame
	for range 4 {
		h, err := ws.ReadHeader(peer)
		require.NoError(t, err)
		assert.True(t, h.Fin)
		assert.False(t, h.Masked)
		b := make([]byte, h.Length)
		_, err = io.ReadFull(peer, b)
		require.NoError(t, err)
		got = append(got, frame{h.OpCode, string(b)})
	}
	assert.Equal(t, []frame{{ws.OpBinary, "first"}, {ws.OpBinary, string(bytes.Repeat([]byte{'x'}, 300))}, {ws.OpPing, ""}, {ws.OpText, "then"}}, got)
}
