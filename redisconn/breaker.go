package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
)

// ErrCircuitOpen reports a Redis call that was not sent because the
// client's circuit breaker is open (or half-open with its one probe already
// out): Redis failed or hung recently, and the call fails at once instead of
// waiting for it. Every user of a client treats it as any other Redis
// failure and falls back as its fail mode says.
var ErrCircuitOpen = errors.New("redisconn: redis circuit breaker open")

// The errors of a rejected call, made once: a rejection must cost nothing.
var (
	errOpenState       = fmt.Errorf("%w: %w", ErrCircuitOpen, gobreaker.ErrOpenState)
	errTooManyRequests = fmt.Errorf("%w: %w", ErrCircuitOpen, gobreaker.ErrTooManyRequests)
	// errExcluded tells the breaker that a call says nothing about Redis.
	errExcluded = errors.New("redisconn: redis call neither succeeded nor failed")
	errPanic    = errors.New("redisconn: redis call panicked")
)

// breakerHook is the redis.Hook of New: a deadline and a circuit
// breaker around every call.
type breakerHook struct {
	// cb is the breaker. Closing it after a probe of the client's own
	// (closeAfterProbe) replaces it with a new, closed one: gobreaker has
	// no way to close a breaker from outside, and a call that the old one
	// let through reports to the old one, which no longer counts.
	cb       atomic.Pointer[gobreaker.TwoStepCircuitBreaker[struct{}]]
	timeout  time.Duration
	failures int
	open     time.Duration
	addr     string // host:port or socket path: never a password
	log      *zap.Logger
	metrics  *clientMetrics

	lastErr atomic.Pointer[error] // the last failure, for the log line
	// epoch and lastFailure (nanoseconds since epoch, on the monotonic
	// clock) date the last failure that counted for the breaker: a call
	// already under way then that fails too failed of the same event
	// (see report).
	epoch       time.Time
	lastFailure atomic.Int64
	// newMaster is set while the breaker is open after the client's
	// watcher has seen a failover: it probes the new master(s).
	newMaster atomic.Bool

	mu       sync.Mutex    // guards the fields below
	openedAt time.Time     // when the breaker last opened
	ready    chan struct{} // closed while the breaker is closed
	// opened receives (without blocking) when the breaker opens: it
	// wakes the client's watcher, which then looks more often.
	opened chan struct{}
}

var _ redis.Hook = (*breakerHook)(nil)

func newBreakerHook(addr string, opts Options, m *clientMetrics) *breakerHook {
	h := &breakerHook{
		timeout:  opts.CommandTimeout,
		failures: opts.BreakerFailures,
		open:     opts.BreakerOpen,
		addr:     addr,
		log:      opts.Logger,
		metrics:  m,
		ready:    make(chan struct{}),
		opened:   make(chan struct{}, 1),
		epoch:    time.Now(),
	}
	h.lastFailure.Store(-1)
	close(h.ready)
	h.cb.Store(h.newBreaker())
	return h
}

// newBreaker returns a closed breaker whose changes of state are the
// hook's while it is the hook's breaker.
func (h *breakerHook) newBreaker() *gobreaker.TwoStepCircuitBreaker[struct{}] {
	failures := uint32(h.failures)
	var cb *gobreaker.TwoStepCircuitBreaker[struct{}]
	cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1, // one probe when half-open
		Timeout:     h.open,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return err == errExcluded },
		// IsSuccessful is err == nil: report classifies.
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if h.cb.Load() == cb { // not one replaced
				h.onStateChange(from, to, "")
			}
		},
	})
	return cb
}

// state is the breaker's state now.
func (h *breakerHook) state() gobreaker.State { return h.cb.Load().State() }

// readyCh returns a channel closed while the breaker is closed: closed
// already if it is closed now, else closed when it closes.
func (h *breakerHook) readyCh() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ready
}

// allow asks the breaker for a call; the error wraps ErrCircuitOpen.
func (h *breakerHook) allow() (done func(error), err error) {
	done, err = h.cb.Load().Allow()
	if err == nil {
		return done, nil
	}
	h.metrics.breakerRejected()
	h.metrics.failed(KindCircuitOpen)
	if errors.Is(err, gobreaker.ErrTooManyRequests) {
		return nil, errTooManyRequests
	}
	return nil, errOpenState
}

// report tells the breaker how a call made with the caller's ctx, sent at
// started, went.
//
// Failures count for the breaker one event at a time: a call that was
// already under way when another failure counted failed of the same
// event, and does not count again. Calls in flight together fail
// together: a stall of the process, a Redis busy for a moment (a fork, a
// slow command) or a lost packet past the deadline ends every call then in
// flight at once, and under load that is more calls than
// Options.BreakerFailures. Counted one by one, one such moment would open
// the breaker and every replica would decide alone for Options.BreakerOpen.
// A Redis that hangs or refuses fails the calls sent after each failure
// too, and opens the breaker after BreakerFailures of them in a row (a
// hang costs that many deadlines, one after the other).
func (h *breakerHook) report(ctx context.Context, done func(error), started time.Time, err error) {
	switch {
	case err == nil || answered(err):
		done(nil)
	case callerDone(ctx) || errors.Is(err, redis.ErrClosed):
		// The caller gave up, or the client is closing: not Redis's doing.
		done(errExcluded)
	case !h.newFailure(started):
		done(errExcluded) // counted already, as the failure of another call
	default:
		h.lastErr.Store(&err)
		done(err)
	}
}

// newFailure reports whether a failed call sent at started is a failure of
// its own, that is, sent after the last one that counted; if so, it is
// the last one that counted from now.
func (h *breakerHook) newFailure(started time.Time) bool {
	sent, now := int64(started.Sub(h.epoch)), int64(time.Since(h.epoch))
	for {
		last := h.lastFailure.Load()
		if sent < last {
			return false
		}
		if h.lastFailure.CompareAndSwap(last, now) {
			return true
		}
	}
}

// callerDone reports whether the caller's ctx has ended. Its deadline is
// checked too: the socket's deadline is the same instant, and the read can
// time out before ctx's timer has run.
func callerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// answered reports whether err is a reply of Redis (redis.Nil included)
// that says it serves, rather than a failure to get one or a reply that
// says it cannot serve now (READONLY, LOADING, CLUSTERDOWN, MASTERDOWN,
// TRYAGAIN, a MOVED or ASK the client's redirects did not resolve): those
// are the failures of a failover, which the client's own retries did not
// outlast, and count as failures.
func answered(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !unavailable(kindOf(err))
}

func (h *breakerHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		// A dial belongs to a command that the breaker let through, to
		// the watcher's probe, or is the pool's own; while the breaker
		// is open, do not wait for one, unless the watcher has seen a
		// failover: then the dials go to the new master, and the
		// probe's, the pool's own (go-redis stops dialing for its
		// callers after as many failed dials as its pool size, until a
		// dial of its own, once a second, succeeds) and a
		// subscription's reconnection may get through.
		if h.state() == gobreaker.StateOpen && !h.newMaster.Load() {
			return nil, errOpenState
		}
		return next(ctx, network, addr)
	}
}

// isRejection reports whether err is the breaker's own, for a call that it
// did not let through.
func isRejection(err error) bool { return err == errOpenState || err == errTooManyRequests }

// inCall marks the context of a call that the breaker let through. The
// commands that go-redis sends to set up a new connection (HELLO, CLIENT
// SETINFO, SELECT) go through the hooks again, inside the call that needs
// the connection: they are part of it, not calls of their own, and must
// not take the half-open breaker's one probe, nor a deadline of their own.
type inCall struct{}

// call runs next for the caller's ctx under the breaker and the deadline.
func (h *breakerHook) call(ctx context.Context, next func(context.Context) error) error {
	done, err := h.allow()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	reported := false
	defer func() {
		// next panicked: report a failure all the same, or a half-open
		// breaker would wait for its probe forever.
		if !reported {
			done(errPanic)
		}
	}()
	started := time.Now()
	err = next(context.WithValue(cctx, inCall{}, true))
	reported = true
	h.report(ctx, done, started, err)
	if err != nil && err != redis.Nil && !callerDone(ctx) {
		h.metrics.failed(kindOf(err))
	}
	return err
}

func (h *breakerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(inCall{}) != nil || ctx.Value(probeCall{}) != nil {
			return next(ctx, cmd)
		}
		h.metrics.sent(1)
		err := h.call(ctx, func(ctx context.Context) error { return next(ctx, cmd) })
		if isRejection(err) {
			cmd.SetErr(err)
		}
		return err
	}
}

func (h *breakerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(inCall{}) != nil || ctx.Value(probeCall{}) != nil {
			return next(ctx, cmds)
		}
		h.metrics.sent(len(cmds))
		err := h.call(ctx, func(ctx context.Context) error { return next(ctx, cmds) })
		if isRejection(err) {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
		}
		return err
	}
}

// closeAfterProbe closes the breaker, if it is not closed, after the
// client's watcher has probed Redis itself and found it serving (by says
// so in the log). It replaces the breaker with a closed one. It reports
// whether the breaker is closed now.
func (h *breakerHook) closeAfterProbe(by string) bool {
	old := h.cb.Load()
	from := old.State()
	if from == gobreaker.StateClosed {
		return true
	}
	if !h.cb.CompareAndSwap(old, h.newBreaker()) {
		return false // another replaced it: look again
	}
	h.onStateChange(from, gobreaker.StateClosed, by)
	return true
}

// onStateChange runs once per transition: under the breaker's lock, or
// from closeAfterProbe (then by says what closed it).
func (h *breakerHook) onStateChange(from, to gobreaker.State, by string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if to == gobreaker.StateClosed && by != "" {
		select {
		case <-h.ready:
			// The replaced breaker's own probe closed it meanwhile.
			return
		default:
		}
	}
	h.metrics.breakerChanged(to)
	switch {
	case from == gobreaker.StateClosed && to == gobreaker.StateOpen:
		h.openedAt = time.Now()
		h.ready = make(chan struct{})
		select {
		case h.opened <- struct{}{}:
		default:
		}
		var cause error
		if p := h.lastErr.Load(); p != nil {
			cause = *p
		}
		h.log.Warn("redis unavailable: circuit breaker open, falling back",
			zap.String("addr", h.addr),
			zap.Int("consecutive_failures", h.failures),
			zap.Duration("command_timeout", h.timeout),
			zap.Duration("probe_interval", h.open),
			zap.Error(cause))
	case to == gobreaker.StateClosed:
		if by == "" {
			by = "a call let through as a probe"
		}
		h.log.Info("redis recovered: circuit breaker closed",
			zap.String("addr", h.addr),
			zap.Duration("unavailable_for", time.Since(h.openedAt).Round(time.Millisecond)),
			zap.String("closed_by", by))
		// Ready's waiters are woken once the recovery is logged, so that
		// whoever waited on it finds the line that says why.
		close(h.ready)
	default: // a probe is let through, or failed: the same outage
		h.log.Debug("redis circuit breaker",
			zap.Stringer("from", from), zap.Stringer("to", to))
	}
}
