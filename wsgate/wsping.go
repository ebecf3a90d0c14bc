package wsgate

import (
	"math"
	"sync/atomic"
	"time"
)

// pingRideMax bounds how early a ping may go with a batch of frames
// instead of in a write of its own (pinger.takeAhead): a stream publishes
// every second, so a ping due within a second nearly always finds a batch
// to go with.
const pingRideMax = time.Second

// The states of a pinger's period.
const (
	pingIdle int32 = iota // the ping of the period is not due yet
	pingDue               // the timer fired: the writer is to send it
	pingSent              // the writer sent it with a batch ahead of the timer
)

// pinger times the writer's pings: one every interval, from a timer that
// sets the period's ping due and signals ctl, behind the same signal as
// the read loop's end.
//
// A ping costs a write of its own when it is sent alone: a client of
// streams that publish every second is written to about fifteen times in
// 15 s, and its ping alone adds a sixteenth. So a ping due
// within ride (pingRideMax, or half the interval if less) goes in
// the write of the batch the writer is about to write (takeAhead), and the
// timer's firing then does nothing; a client with no frame in that time is
// pinged alone when the timer fires (takeDue), as before. A ping is never
// later than the timer, and never more than ride earlier; the writer sends
// one ahead only when the previous one was answered, so a client's pong
// has at least the interval, and the client that did not answer is closed
// when the timer fires, as before.
type pinger struct {
	state   atomic.Int32 // pingIdle, pingDue or pingSent
	next    atomic.Int64 // when the timer fires next, in Unix nanoseconds
	stopped atomic.Bool
	every   time.Duration
	ride    time.Duration
	ctl     chan<- struct{}
	t       *time.Timer
}

func newPinger(every time.Duration, ctl chan<- struct{}) *pinger {
	p := &pinger{every: every, ride: min(pingRideMax, every/2), ctl: ctl}
	p.t = time.AfterFunc(math.MaxInt64, p.fire)
	p.arm() // after p.t is set: fire reads it
	return p
}

// arm sets the timer to fire one interval from now.
func (p *pinger) arm() {
	p.next.Store(time.Now().Add(p.every).UnixNano())
	p.t.Reset(p.every)
}

// fire is the timer's function: the period's ping is due, unless the writer
// sent it with a batch already.
func (p *pinger) fire() {
	if p.stopped.Load() {
		return
	}
	p.arm()
	if p.state.CompareAndSwap(pingSent, pingIdle) {
		return
	}
	p.state.Store(pingDue)
	signal(p.ctl)
}

// takeDue reports whether the timer fired and the period's ping is still
// to be sent; the caller sends it.
func (p *pinger) takeDue() bool {
	return p.state.CompareAndSwap(pingDue, pingIdle)
}

// takeAhead reports whether the period's ping, not yet due, is due within
// ride of now; the caller sends it with its batch.
func (p *pinger) takeAhead(now time.Time) bool {
	if now.UnixNano() < p.next.Load()-int64(p.ride) {
		return false
	}
	return p.state.CompareAndSwap(pingIdle, pingSent)
}

// stop stops the timer; a run already under way arms it once more, and
// that run does nothing.
func (p *pinger) stop() {
	p.stopped.Store(true)
	p.t.Stop()
}
