package proxy

import (
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"streamgate/archive"
)

// openingMax bounds what one holder keeps while the archive is opening
// (PostgreSQL, opened in the background): 16,384 reports, a thousand
// streams for sixteen seconds.
const openingMax = 16384

// opening holds what is to be written to the archive while its store is
// not open yet (a hub's frames, Gateway.ArchiveFrames; the REST answers'
// reports, Archive.hold), in the order held, until it opens (drain), so
// that a report the gateway served is kept from its first request or
// frame. Beyond openingMax reports, what is not held is counted as the
// Writer's drops are (archive.DropQueueFull) when the holder drains, and
// logged once.
type opening[T any] struct {
	open atomic.Bool // drained: every later write goes to the Writer at once

	mu     sync.Mutex
	held   []T
	n      int // reports held
	lost   int
	logged bool
}

// hold keeps x, n reports, for the Writer; false when the holder has
// drained since the caller looked (the archive is open): the caller
// writes x itself. Beyond the bound x is lost: counted, and warn is
// logged once to log.
func (q *opening[T]) hold(x T, n int, log *zap.Logger, warn string, fields ...zap.Field) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.open.Load() {
		return false
	}
	if q.n+n <= openingMax {
		q.held = append(q.held, x)
		q.n += n
		return true
	}
	q.lost += n
	if !q.logged && log != nil {
		q.logged = true
		log.Warn(warn, append(fields, zap.Int("held", openingMax))...)
	}
	return true
}

// drain gives what is held to keep, in order, once, and counts what was
// lost in w's drops. A hold meanwhile waits for it, so that what it
// holds follows them.
func (q *opening[T]) drain(keep func(T), w *archive.Writer) {
	if q.open.Load() {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.open.Load() {
		return
	}
	for _, x := range q.held {
		keep(x)
	}
	if q.lost > 0 {
		w.Lost(q.lost, archive.DropQueueFull)
	}
	q.held, q.n, q.lost = nil, 0, 0
	q.open.Store(true)
}
