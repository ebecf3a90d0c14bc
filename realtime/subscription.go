package realtime

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"streamgate/feedid"
)

// The reasons a subscription ends, from Err.
var (
	// ErrSlowConsumer: the subscription's queue overflowed.
	ErrSlowConsumer = errors.New("realtime: slow consumer: queue overflowed")
	// ErrHubClosed: the hub was closed.
	ErrHubClosed = errors.New("realtime: hub closed")
)

// DefaultQueue is the queue length of a subscription asked with queue < 1.
const DefaultQueue = 64

// Subscription is one consumer's view of a set of feeds: the report frames,
// in a bounded queue. Its memory is the struct, its feed list (shared with
// the caller's slice) and the queue: one slice header (24 bytes) per slot,
// the frames themselves being shared by every subscriber. It holds no
// pointer to its hub: it is given, when made, the two things it asks of
// the hub (leave, drop).
type Subscription struct {
	feeds []feedid.ID // guarded by the hub's mu
	ch    chan *Frame

	// leave gives the subscription's feeds back (release, once); drop
	// stops some of them (Drop). The hub's, given by subscribe.
	leave func(*Subscription)
	drop  func(s *Subscription, feeds []feedid.ID) int

	mu     sync.Mutex // guards the send and the close of ch, closed, err, backlog
	closed bool
	err    error

	// backlog holds, in order, frames that did not fit in ch while a
	// replay (resume, backfill) is under way; a pump moves them into ch
	// as the consumer reads. Live frames go behind it while it is not
	// empty, so that the order holds; nil when empty.
	backlog []*Frame
	pumping bool
	pumpWG  sync.WaitGroup
	done    chan struct{} // closed when the subscription ends (stops the pump)
	// held are, per feed whose resume fill is under way, the frames that
	// wait for it (see SubscribeOptions.From); holding counts its feeds.
	held    map[feedid.ID][]histFrame
	holding atomic.Int32

	releaseOnce sync.Once

	// charge is asked before each second fetched for this subscription's
	// resume (nil: nothing to charge).
	charge FillCharge
	// fillRefused is set once charge refused a second: the resume fills
	// of the subscription stop.
	fillRefused atomic.Bool

	// replayed is how many reports the subscription replayed at once from
	// the history (SubscribeOptions.From); set before Subscribe returns.
	replayed int

	// dropped are the feeds dropped by Drop; nil before any.
	dropped atomic.Pointer[map[feedid.ID]bool]
}

// C returns the frames, one report each, as the hub read them at its
// entry (Frame: the stream, the times and the upstream's bytes
// unchanged). They are shared with other subscribers: never modify them.
// C is closed when the subscription ends; then Err says why.
func (s *Subscription) C() <-chan *Frame { return s.ch }

// Replayed returns how many reports the subscription replayed at once
// from the hub's history when it resumed (SubscribeOptions.From); those
// fetched with Config.Backfill follow, and both are counted in
// streamgate_ws_replayed_reports_total. 0 for a new consumer.
func (s *Subscription) Replayed() int { return s.replayed }

// Err returns, once C is closed, why: nil after Close, ErrSlowConsumer when
// the queue overflowed, ErrHubClosed when the hub was closed. Before, nil.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// ended reports whether the subscription has ended (closed, overflowed,
// or its hub closed).
func (s *Subscription) ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close ends the subscription; the hub releases its feeds (an upstream
// subscription nobody else wants is dropped after Config.Grace).
// Idempotent, and safe after the subscription ended otherwise.
func (s *Subscription) Close() {
	s.end(nil)
	s.release()
}

// maxBacklog bounds a subscription's backlog: the frames of a replay
// (resume, backfill) beyond its queue, and the live frames behind them.
const maxBacklog = 16384

// send queues frame without blocking; it reports false when the queue was
// full, in which case the subscription is closed with ErrSlowConsumer (the
// caller releases it). While a replay's backlog drains, frame goes behind
// it. Called with the feed's lock held.
func (s *Subscription) send(frame *Frame) (sent, overflow bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false, false
	}
	if s.backlog != nil {
		if len(s.backlog) >= maxBacklog {
			s.mu.Unlock()
			s.end(ErrSlowConsumer)
			return false, true
		}
		s.backlog = append(s.backlog, frame)
		s.mu.Unlock()
		return true, false
	}
	select {
	case s.ch <- frame:
		s.mu.Unlock()
		return true, false
	default:
		s.closed, s.err = true, ErrSlowConsumer
		close(s.ch)
		s.mu.Unlock()
		return false, true
	}
}

// replay queues frames, in order, ahead of every frame sent afterwards:
// what does not fit in the queue waits in the backlog, which a pump moves
// into the queue as the consumer reads, instead of overflowing it. It
// reports false when the backlog overflowed (the subscription is then
// closed with ErrSlowConsumer; the caller releases it). Called with the
// locks of the frames' feeds held, or before the subscription is
// registered with them.
func (s *Subscription) replay(frames []*Frame) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return true
	}
	for i, f := range frames {
		if s.backlog == nil {
			select {
			case s.ch <- f:
				continue
			default:
			}
		}
		if len(s.backlog)+len(frames)-i > maxBacklog {
			s.mu.Unlock()
			s.end(ErrSlowConsumer)
			return false
		}
		s.backlog = append(s.backlog, frames[i:]...)
		break
	}
	if s.backlog != nil && !s.pumping {
		s.pumping = true
		s.pumpWG.Add(1)
		go s.pump()
	}
	s.mu.Unlock()
	return true
}

// pump moves the backlog into the queue, blocking while the queue is
// full, until the backlog is empty or the subscription ends.
func (s *Subscription) pump() {
	defer s.pumpWG.Done()
	for {
		s.mu.Lock()
		if s.closed || len(s.backlog) == 0 {
			s.backlog, s.pumping = nil, false
			s.mu.Unlock()
			return
		}
		f := s.backlog[0]
		s.mu.Unlock()
		select {
		case s.ch <- f:
		case <-s.done:
			return
		}
		s.mu.Lock()
		s.backlog[0] = nil
		s.backlog = s.backlog[1:]
		s.mu.Unlock()
	}
}

// end closes the channel with err unless it is closed already; it reports
// whether it closed it. A pump still running is stopped first.
func (s *Subscription) end(err error) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed, s.err = true, err
	close(s.done)
	s.mu.Unlock()
	s.pumpWG.Wait()
	s.mu.Lock()
	s.backlog = nil
	close(s.ch)
	s.mu.Unlock()
	return true
}

// release gives the subscription's feeds back to the hub, once.
func (s *Subscription) release() {
	s.releaseOnce.Do(func() { s.leave(s) })
}

// Drop stops feeds for this subscription at once: the hub no longer
// delivers them to it (a feed nobody else wants starts its grace), and
// Keep reports false for their frames already queued. The subscription's
// other feeds go on. It returns how many feeds the subscription still
// has. Safe for concurrent use with the hub's deliveries.
func (s *Subscription) Drop(feeds ...feedid.ID) int { return s.drop(s, feeds) }

// Keep reports whether frame, taken from C, is of a feed still
// subscribed: false for the frames of a dropped feed (see Drop) queued
// before it was dropped. Lock-free; before any Drop it always reports
// true.
func (s *Subscription) Keep(frame *Frame) bool {
	d := s.dropped.Load()
	return d == nil || !(*d)[frame.Stream]
}

// holdFeed makes the frames of feed wait, starting with first, until
// unhold. Called with the feed's lock held.
func (s *Subscription) holdFeed(feed feedid.ID, first []histFrame) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[feedid.ID][]histFrame{}
	}
	s.held[feed] = slices.Clone(first)
	s.holding.Add(1)
}

// deliver queues frames of feed, in order: held while the feed waits for
// its resume fill, else behind the backlog or in the queue. It reports how
// many it queued, and false when the subscription overflowed (the caller
// releases it). Called with the feed's lock held.
func (s *Subscription) deliver(feed feedid.ID, frames []histFrame) (int, bool) {
	if s.holding.Load() > 0 {
		s.mu.Lock()
		if h, ok := s.held[feed]; ok {
			s.held[feed] = append(h, frames...)
			s.mu.Unlock()
			return 0, true
		}
		s.mu.Unlock()
	}
	if len(frames) == 1 {
		sent, overflow := s.send(frames[0].frame)
		if sent {
			return 1, true
		}
		return 0, !overflow
	}
	b := make([]*Frame, len(frames))
	for i, x := range frames {
		b[i] = x.frame
	}
	if !s.replay(b) {
		return 0, false
	}
	return len(b), true
}

// fanOut queues frames (in order) to every subscriber of f, as deliver
// does for each. It returns how many it queued and the subscriptions that
// overflowed (to release once f.mu is let go: see hubMetrics.fannedOut).
// f.mu is held.
func (f *feed) fanOut(frames []histFrame) (n int, slow []*Subscription) {
	for _, s := range f.subs {
		k, ok := s.deliver(f.id, frames)
		n += k
		if !ok {
			slow = append(slow, s)
		}
	}
	return n, slow
}

// addHeld adds got to the frames held for feed and returns them all, in
// order, each second once. Called with the feed's lock held.
func (s *Subscription) addHeld(feed feedid.ID, got []histFrame) []histFrame {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := mergeFrames(got, s.held[feed])
	if _, ok := s.held[feed]; ok {
		s.held[feed] = all
	}
	return all
}

// unhold ends the wait of feed: the fill's frames got and those held, in
// order, each second once, are queued. It reports false when the
// subscription overflowed. Called with the feed's lock held.
func (s *Subscription) unhold(feed feedid.ID, got []histFrame) bool {
	s.mu.Lock()
	held, ok := s.held[feed]
	if ok {
		delete(s.held, feed)
		s.holding.Add(-1)
	}
	s.mu.Unlock()
	all := mergeFrames(got, held)
	if len(all) == 0 {
		return true
	}
	b := make([]*Frame, len(all))
	for i, x := range all {
		b[i] = x.frame
	}
	return s.replay(b)
}
