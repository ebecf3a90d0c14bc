package realtime

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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
// the frames themselves being shared by every subscriber.
type Subscription struct {
	h     *Hub
	feeds []string
	ch    chan []byte

	mu     sync.Mutex // guards the send and the close of ch, closed, err
	closed bool
	err    error

	releaseOnce sync.Once

	// dropped are the feeds dropped by Drop; nil before any.
	dropped atomic.Pointer[map[string]bool]
}

// C returns the frames, one report each, the upstream's bytes unchanged.
// The slices are shared with other subscribers: never modify them. C is
// closed when the subscription ends; then Err says why.
func (s *Subscription) C() <-chan []byte { return s.ch }

// Err returns, once C is closed, why: nil after Close, ErrSlowConsumer when
// the queue overflowed, ErrHubClosed when the hub was closed. Before, nil.
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the subscription; the hub releases its feeds (an upstream
// subscription nobody else wants is dropped after Config.Grace).
// Idempotent, and safe after the subscription ended otherwise.
func (s *Subscription) Close() {
	s.end(nil)
	s.release()
}

// send queues frame without blocking; it reports false when the queue was
// full, in which case the subscription is closed with ErrSlowConsumer (the
// caller releases it). Called with the feed's lock held.
func (s *Subscription) send(frame []byte) (sent, overflow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, false
	}
	select {
	case s.ch <- frame:
		return true, false
	default:
		s.closed, s.err = true, ErrSlowConsumer
		close(s.ch)
		return false, true
	}
}

// end closes the channel with err unless it is closed already; it reports
// whether it closed it.
func (s *Subscription) end(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.closed, s.err = true, err
	close(s.ch)
	return true
}

// release gives the subscription's feeds back to the hub, once.
func (s *Subscription) release() {
	s.releaseOnce.Do(func() { s.h.release(s) })
}

// Drop stops feeds for this subscription at once: the hub no longer
// delivers them to it (a feed nobody else wants starts its grace), and
// Keep reports false for their frames already queued. The subscription's
// other feeds go on. It returns how many feeds the subscription still
// has. Safe for concurrent use with the hub's deliveries.
func (s *Subscription) Drop(feeds ...string) int {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	drop := make(map[string]bool, len(feeds))
	for _, id := range feeds {
		if slices.Contains(s.feeds, id) {
			drop[id] = true
		}
	}
	if len(drop) == 0 {
		return len(s.feeds)
	}
	// The caller's slice is shared: build a new one.
	kept := make([]string, 0, len(s.feeds))
	for _, id := range s.feeds {
		if !drop[id] {
			kept = append(kept, id)
		}
	}
	old := map[string]bool{}
	if d := s.dropped.Load(); d != nil {
		maps.Copy(old, *d)
	}
	maps.Copy(old, drop)
	s.dropped.Store(&old)
	if _, ok := s.h.subs[s]; ok {
		now := time.Now()
		for id := range drop {
			s.h.unwant(s, id, now)
		}
	}
	s.feeds = kept
	return len(kept)
}

// Keep reports whether frame, taken from C, is of a feed still
// subscribed: false for the frames of a dropped feed (see Drop) queued
// before it was dropped, and for a frame that is not a report. Lock-free;
// before any Drop it always reports true.
func (s *Subscription) Keep(frame []byte) bool {
	d := s.dropped.Load()
	if d == nil {
		return true
	}
	feed, _, ok := parseFrame(frame)
	return ok && !(*d)[string(feed)]
}
