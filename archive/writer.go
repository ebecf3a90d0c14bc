package archive

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/feedid"
)

// WriterOptions are a Writer's settings; a zero field takes its default.
type WriterOptions struct {
	Queue    int           // reports waiting at most; default 65536
	Batch    int           // reports per write at most; default 1000
	Interval time.Duration // a batch that is not full waits at most this; default 200 ms
	// Timeout bounds one write of a batch; default 5 s.
	Timeout time.Duration
	// Retries is how many times a failed batch is tried again before its
	// reports are dropped; default 3. Backoff is the first pause between
	// tries, doubled each time; default 100 ms.
	Retries int
	Backoff time.Duration
	// OnDrop is told each report the Writer will not store (reason
	// DropQueueFull, DropStoreError, DropClosed), so that the caller can
	// record a hole in the stream's coverage. It is called from Add (queue
	// full, closed, invalid) or from the Writer's goroutine (store error), and must
	// not block.
	OnDrop func(network string, stream feedid.ID, ts uint32, reason string)
	// CoverEvery is how often the spans the stream's reports prove
	// (AddFollowing) are recorded in the coverage, each stream's in one
	// call; default 5 s. Flush and Close record them too.
	CoverEvery time.Duration
	// OnChain, if set, is told the first second of each new chain of a
	// stream's reports (the first span AddFollowing proves after the
	// Writer started or after a break: a report it did not store, one the
	// hub could not vouch for) once that span is recorded: the seconds
	// before it, back to the stream's previous span, are a hole. It is
	// called from the goroutine that records the spans, and must not block.
	OnChain func(network string, stream feedid.ID, from uint32)
	Metrics *Metrics
	Logger  *zap.Logger // nil: none
}

// Writer puts reports into a Store in batches from one goroutine, so that
// the hot path's Add never waits: a bounded queue, and on overflow the
// report is dropped, counted and handed to OnDrop. Store errors are
// retried within a bound, then the batch is dropped the same way.
type Writer struct {
	store Store
	o     WriterOptions
	log   *zap.Logger

	queue    chan item
	flushes  chan chan struct{}
	quit     chan struct{}
	done     chan struct{}
	recorded chan struct{} // closed when recordLoop returns

	closeMu sync.RWMutex // Add holds it read, Close write: nothing is queued after the quit
	closed  bool

	overflow atomic.Bool  // in an episode of a full queue
	lost     atomic.Int64 // dropped in the current episode
	failing  atomic.Bool  // in an episode of store errors (set by the goroutine)

	// Counts, for tests and the caller's status: reports stored, skipped
	// as duplicates, dropped (every reason), and failed store calls.
	written, duplicates, dropped, errs atomic.Int64

	// The stream's claims (AddFollowing): per stream, what the reports
	// stored so far prove, until recorded (see chains.go).
	claimMu sync.Mutex
	claims  map[chainKey]*chain
	coverMu sync.Mutex // one recording of the claims at a time
}

// item is what one Add or AddCovered queued: a report, or the reports of
// one answer with the span of coverage they prove, applied only once all
// of them are stored.
type item struct {
	r     Report
	more  []Report // AddCovered: the answer's other reports
	cover bool     // AddCovered: span is stored once r and more are
	span  Span
	// AddFollowing: r is a stream's, following the report at follows (0:
	// none) when the hub handed it.
	stream  bool
	follows uint32
	at      time.Time
}

// n is the reports it holds.
func (it *item) n() int { return 1 + len(it.more) }

// NewWriter starts a Writer in front of store; stop it with Close.
func NewWriter(store Store, o WriterOptions) *Writer {
	if o.Queue <= 0 {
		o.Queue = 65536
	}
	if o.Batch <= 0 {
		o.Batch = 1000
	}
	if o.Interval <= 0 {
		o.Interval = 200 * time.Millisecond
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = 3
	}
	if o.Backoff <= 0 {
		o.Backoff = 100 * time.Millisecond
	}
	if o.CoverEvery <= 0 {
		o.CoverEvery = 5 * time.Second
	}
	w := &Writer{store: store, o: o, log: o.Logger,
		queue: make(chan item, o.Queue), flushes: make(chan chan struct{}),
		quit: make(chan struct{}), done: make(chan struct{}), recorded: make(chan struct{}), claims: map[chainKey]*chain{}}
	if w.log == nil {
		w.log = zap.NewNop()
	}
	go w.run()
	go w.recordLoop()
	return w
}

// Add queues r for writing and returns at once: false when r was dropped
// (the queue is full, or the Writer closed), as OnDrop is told.
func (w *Writer) Add(r Report) bool {
	return w.enqueue(item{r: r})
}

// AddFollowing queues r, a report the real-time hub handed, with the
// second of the stream's report it follows (realtime.Frame.Follows: the
// hub's continuity vouches that nothing lies between them; 0 when it
// does not). Once this Writer stored both, the one after the other, the
// span [follows, r's second] is claimed: recorded in the stream's
// coverage within CoverEvery (Flush and Close record it at once). A report
// it drops breaks the chain, so that no claim spans a report the store
// lacks. It returns at once, as Add.
func (w *Writer) AddFollowing(r Report, follows uint32) bool {
	return w.enqueue(item{r: r, stream: true, follows: follows})
}

// AddCovered queues the reports of one answer (reports, at least one) and
// the span of network's stream that the answer proves complete: the span
// is added to the stream's coverage once every one of them is stored (a
// duplicate counts as stored), and never when any is dropped, so that
// coverage never claims a report the store does not hold. It returns at
// once: false when they were dropped, as OnDrop is told of each.
func (w *Writer) AddCovered(reports []Report, network string, stream feedid.ID, span Span) bool {
	if len(reports) == 0 || span.From > span.To {
		return false
	}
	// The span's network and stream are those of its reports.
	for i := range reports {
		if reports[i].Network != network || reports[i].Stream != stream {
			w.drop([]item{{r: reports[0], more: reports[1:]}}, DropInvalid)
			return false
		}
	}
	return w.enqueue(item{r: reports[0], more: reports[1:], cover: true, span: span})
}

func (w *Writer) enqueue(it item) bool {
	w.closeMu.RLock()
	defer w.closeMu.RUnlock()
	if w.closed {
		w.drop([]item{it}, DropClosed)
		return false
	}
	if it.r.check() != nil || checkAll(it.more) != nil { // no store takes it: it would fail its whole batch
		w.drop([]item{it}, DropInvalid)
		return false
	}
	it.at = time.Now()
	select {
	case w.queue <- it:
		if w.overflow.Load() && w.overflow.CompareAndSwap(true, false) {
			w.log.Warn("archive: the write queue takes reports again",
				zap.Int64("dropped", w.lost.Swap(0)))
		}
		return true
	default:
	}
	w.lost.Add(int64(it.n()))
	if w.overflow.CompareAndSwap(false, true) {
		w.log.Warn("archive: the write queue is full; reports are dropped, each a hole in its stream's coverage, until it takes them again",
			zap.Int("queue", w.o.Queue))
	}
	w.drop([]item{it}, DropQueueFull)
	return false
}

// Health says what is wrong with the Writer now, "" when nothing is: its
// queue overflowing, or its store failing writes.
func (w *Writer) Health() string {
	switch {
	case w.overflow.Load():
		return "the write queue is full: reports are dropped, each a hole in its stream's coverage"
	case w.failing.Load():
		return "the store fails writes: batches are retried, then dropped, each report a hole in its stream's coverage"
	}
	return ""
}

func (w *Writer) drop(items []item, reason string) {
	n := 0
	for i := range items {
		n += items[i].n()
	}
	w.dropped.Add(int64(n))
	w.o.Metrics.drop(reason, n)
	if w.o.OnDrop != nil {
		for _, it := range items {
			w.o.OnDrop(it.r.Network, it.r.Stream, it.r.ObservationsTimestamp, reason)
			for _, r := range it.more {
				w.o.OnDrop(r.Network, r.Stream, r.ObservationsTimestamp, reason)
			}
		}
	}
}

// Lost counts n reports the caller held for the Writer and could not give
// it (held while the store was not open yet, beyond the caller's bound)
// as dropped for reason, as the Writer's own drops are.
func (w *Writer) Lost(n int, reason string) {
	w.dropped.Add(int64(n))
	w.o.Metrics.drop(reason, n)
}

// Flush returns once every report added before it was written (or
// dropped) and the spans they prove recorded, or when ctx ends.
func (w *Writer) Flush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case w.flushes <- ack:
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.recordClaims(ctx)
	return nil
}

// Close stops the Writer once it has written what is queued (a failing
// store's batches dropped after their first retry) and recorded the spans
// the stream's reports prove, and waits for that until ctx ends; later
// Adds are dropped (DropClosed). It does not close the store.
func (w *Writer) Close(ctx context.Context) error {
	w.closeMu.Lock()
	if !w.closed {
		w.closed = true
		close(w.quit)
	}
	w.closeMu.Unlock()
	for _, ch := range []chan struct{}{w.done, w.recorded} {
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	w.recordClaims(ctx)
	return nil
}

// WriterCounts is what a Writer counted since its start.
type WriterCounts struct {
	Written    int64 // reports stored
	Duplicates int64 // reports skipped as already stored
	Dropped    int64 // reports dropped, for every reason
	Errors     int64 // failed store calls
}

// Counts returns what w counted since its start.
func (w *Writer) Counts() WriterCounts {
	return WriterCounts{Written: w.written.Load(), Duplicates: w.duplicates.Load(), Dropped: w.dropped.Load(), Errors: w.errs.Load()}
}

func (w *Writer) run() {
	defer close(w.done)
	tick := time.NewTicker(w.o.Interval)
	defer tick.Stop()
	batch := make([]item, 0, w.o.Batch)
	for {
		select {
		case it := <-w.queue:
			batch = append(batch, it)
			if reportsIn(batch) >= w.o.Batch {
				batch = w.write(batch)
			}
		case <-tick.C:
			batch = w.write(batch)
		case ack := <-w.flushes:
			batch = w.drain(batch)
			close(ack)
		case <-w.quit:
			w.drain(batch)
			return
		}
	}
}

// drain writes batch and every report queued now.
func (w *Writer) drain(batch []item) []item {
	for {
		select {
		case it := <-w.queue:
			batch = append(batch, it)
			if reportsIn(batch) >= w.o.Batch {
				batch = w.write(batch)
			}
		default:
			return w.write(batch)
		}
	}
}

// write writes batch, trying again within the bound, and returns it
// emptied for reuse.
func (w *Writer) write(batch []item) []item {
	if len(batch) == 0 {
		return batch
	}
	reports := make([]Report, 0, reportsIn(batch))
	for i := range batch {
		reports = append(append(reports, batch[i].r), batch[i].more...)
	}
	pause := w.o.Backoff
	for try := 0; ; try++ {
		ctx, cancel := context.WithTimeout(context.Background(), w.o.Timeout)
		res, err := w.store.Write(ctx, reports)
		cancel()
		if err == nil {
			now := time.Now()
			w.written.Add(int64(res.Written))
			w.duplicates.Add(int64(res.Duplicates))
			if m := w.o.Metrics; m != nil {
				m.batch.Observe(float64(len(batch)))
				for i := range batch {
					m.lag.Observe(now.Sub(batch[i].at).Seconds())
				}
			}
			if w.failing.Load() {
				w.failing.Store(false)
				w.log.Info("archive: the store takes reports again")
			}
			w.cover(batch)
			w.chain(batch)
			return batch[:0]
		}
		w.errs.Add(1) // the store counts it by kind in the metrics
		if !w.failing.Load() {
			w.failing.Store(true)
			w.log.Warn("archive: the store fails writes; a batch still failing after its retries is dropped, each report a hole in its stream's coverage",
				zap.Error(err), zap.String("kind", ErrorKind(err)))
		}
		if try >= w.o.Retries || w.quitting() && try > 0 {
			w.drop(batch, DropStoreError)
			return batch[:0]
		}
		select {
		case <-time.After(pause):
		case <-w.quit:
		}
		pause *= 2
	}
}

// reportsIn counts the reports of batch.
func reportsIn(batch []item) int {
	n := 0
	for i := range batch {
		n += batch[i].n()
	}
	return n
}

// cover adds the spans of the items of batch, whose reports are stored. A
// span that fails is not retried: the coverage is then smaller than it
// could be, never larger than what is held.
func (w *Writer) cover(batch []item) {
	for i := range batch {
		it := &batch[i]
		if !it.cover {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.o.Timeout)
		err := w.store.AddCoverage(ctx, it.r.Network, it.r.Stream, it.span)
		cancel()
		if err != nil {
			w.errs.Add(1)
			w.log.Warn("archive: a span of coverage was not stored; its seconds are asked of the upstream again",
				zap.String("network", it.r.Network), zap.Stringer("span", it.span), zap.Error(err))
		}
	}
}

func (w *Writer) quitting() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}
