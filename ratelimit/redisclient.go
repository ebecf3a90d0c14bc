package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
)

// ErrCircuitOpen reports a Redis call that was not sent because the
// client's circuit breaker is open (or half-open with its one probe already
// out): Redis failed or hung recently, and the call fails at once instead of
// waiting for it. Every Redis implementation of this package treats it as
// any other Redis failure and falls back as its FailMode says.
var ErrCircuitOpen = errors.New("ratelimit: redis circuit breaker open")

// The errors of a rejected call, made once: a rejection must cost nothing.
var (
	errOpenState       = fmt.Errorf("%w: %w", ErrCircuitOpen, gobreaker.ErrOpenState)
	errTooManyRequests = fmt.Errorf("%w: %w", ErrCircuitOpen, gobreaker.ErrTooManyRequests)
	// errExcluded tells the breaker that a call says nothing about Redis.
	errExcluded = errors.New("ratelimit: redis call neither succeeded nor failed")
	errPanic    = errors.New("ratelimit: redis call panicked")
)

// Defaults of RedisClientOptions.
const (
	// DefaultRedisCommandTimeout bounds every command and pipeline, from
	// taking a connection out of the pool to reading the reply. The
	// commands of this package are O(1) scripts that a healthy Redis
	// answers in well under a millisecond, a few across zones; 100ms is
	// far above that, yet a request that meets a hanging Redis loses at
	// most that much.
	DefaultRedisCommandTimeout = 100 * time.Millisecond
	// DefaultRedisDialTimeout bounds one dial. go-redis dials in the
	// background and a caller waits for it only until its command's
	// deadline, so this is not a request's wait.
	DefaultRedisDialTimeout = time.Second
	// DefaultBreakerFailures consecutive failed calls open the breaker:
	// enough that one lost packet does not, few enough that a hanging
	// Redis costs a handful of timeouts.
	DefaultBreakerFailures = 3
	// DefaultBreakerOpen is how long the breaker stays open before one
	// probe may go to Redis; as RetryInterval, so a hanging Redis costs
	// at most one command timeout per second.
	DefaultBreakerOpen = time.Second
)

// RedisClientOptions configure NewRedisClient. The zero value is valid.
type RedisClientOptions struct {
	// CommandTimeout is the deadline of each command and pipeline (see
	// DefaultRedisCommandTimeout). A caller's earlier deadline wins.
	CommandTimeout time.Duration
	// DialTimeout bounds one dial. Default DefaultRedisDialTimeout.
	DialTimeout time.Duration
	// BreakerFailures is how many consecutive failed calls open the
	// breaker. Default DefaultBreakerFailures.
	BreakerFailures int
	// BreakerOpen is how long the breaker stays open before it lets one
	// probe through. Default DefaultBreakerOpen.
	BreakerOpen time.Duration
	// Metrics receives the breaker's state and transitions; nil records
	// nothing.
	Metrics *Metrics
	// Logger receives one line when Redis becomes unavailable and one when
	// it has recovered; nil logs nothing.
	Logger *zap.Logger
}

func (o RedisClientOptions) withDefaults() (RedisClientOptions, error) {
	if o.CommandTimeout < 0 || o.DialTimeout < 0 || o.BreakerFailures < 0 || o.BreakerOpen < 0 {
		return o, errors.New("ratelimit: negative redis client option")
	}
	if o.CommandTimeout == 0 {
		o.CommandTimeout = DefaultRedisCommandTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultRedisDialTimeout
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerOpen == 0 {
		o.BreakerOpen = DefaultBreakerOpen
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}

// NewRedisClient returns the Redis client of the process, for every Redis
// implementation of this package and for the shared replay record. url is a
// redis://, rediss:// or unix:// URL; password, if not empty, replaces the
// URL's.
//
// The client is tuned for calls that sit on a request's path:
//
//   - Every command and pipeline (Script.Run's EVALSHA and EVAL included)
//     has a deadline of opts.CommandTimeout, which covers the wait for a
//     connection, the dial and the reply. The client respects contexts
//     (ContextTimeoutEnabled), so a caller's earlier deadline or
//     cancellation also ends the call.
//   - No retries: go-redis's MaxRetries is -1 (0 would mean 3), and one
//     dial attempt (DialerRetries 1; 0 would mean 5, 100ms apart).
//   - A circuit breaker (github.com/sony/gobreaker) wraps every command,
//     pipeline and dial through a redis.Hook. After opts.BreakerFailures
//     consecutive failures (timeouts, connection errors) it opens: for
//     opts.BreakerOpen every call fails at once with an error wrapping
//     ErrCircuitOpen, and dials are not attempted. Then it lets one call
//     through as a probe: its success closes the breaker, its failure opens
//     it again. Replies of Redis, errors included (redis.Nil, a script's
//     error, WRONGTYPE, NOSCRIPT, LOADING), are successes: Redis answered.
//     A call ended by its caller's own context counts as neither.
//
// So a hanging Redis costs each request in flight when it hangs one
// timeout, then one probe's timeout per opts.BreakerOpen, and every other
// call fails at once, for the fallbacks (FailMode) to decide. The breaker
// logs the outage and the recovery once each, and reports them through
// opts.Metrics (streamgate_redis_breaker_state,
// streamgate_redis_breaker_transitions_total,
// streamgate_redis_breaker_rejected_total); neither the logs nor the
// metrics carry the URL or the password.
//
// The client is meant for short commands: a blocking one (BLPOP, XREAD
// BLOCK, …) would be cut at the deadline. Make one client per process and
// Redis: the breaker and the metrics belong to it.
func NewRedisClient(url, password string, opts RedisClientOptions) (*redis.Client, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	ro, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("ratelimit: redis url: %w", err)
	}
	if password != "" {
		ro.Password = password
	}
	ro.DialTimeout = opts.DialTimeout
	// The deadline of the hook bounds every read and write; these only
	// back it up for the connection's own housekeeping.
	ro.ReadTimeout, ro.WriteTimeout = opts.CommandTimeout, opts.CommandTimeout
	ro.ContextTimeoutEnabled = true
	ro.MaxRetries = -1
	ro.DialerRetries = 1
	c := redis.NewClient(ro)
	c.AddHook(newBreakerHook(ro.Addr, opts))
	return c, nil
}

// breakerHook is the redis.Hook of NewRedisClient: a deadline and a circuit
// breaker around every call.
type breakerHook struct {
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	timeout  time.Duration
	failures int
	open     time.Duration
	addr     string // host:port or socket path: never a password
	log      *zap.Logger
	metrics  *Metrics

	lastErr  atomic.Pointer[error] // the last failure, for the log line
	openedAt time.Time             // guarded by cb's lock: set in onStateChange
}

var _ redis.Hook = (*breakerHook)(nil)

func newBreakerHook(addr string, opts RedisClientOptions) *breakerHook {
	h := &breakerHook{
		timeout:  opts.CommandTimeout,
		failures: opts.BreakerFailures,
		open:     opts.BreakerOpen,
		addr:     addr,
		log:      opts.Logger,
		metrics:  opts.Metrics,
	}
	failures := uint32(opts.BreakerFailures)
	h.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1, // one probe when half-open
		Timeout:     opts.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		IsExcluded:  func(err error) bool { return err == errExcluded },
		// IsSuccessful is err == nil: report classifies.
		OnStateChange: h.onStateChange,
	})
	return h
}

// allow asks the breaker for a call; the error wraps ErrCircuitOpen.
func (h *breakerHook) allow() (done func(error), err error) {
	done, err = h.cb.Allow()
	if err == nil {
		return done, nil
	}
	h.metrics.breakerRejected()
	if errors.Is(err, gobreaker.ErrTooManyRequests) {
		return nil, errTooManyRequests
	}
	return nil, errOpenState
}

// report tells the breaker how a call made with the caller's ctx went.
func (h *breakerHook) report(ctx context.Context, done func(error), err error) {
	switch {
	case err == nil || isReply(err):
		done(nil)
	case callerDone(ctx) || errors.Is(err, redis.ErrClosed):
		// The caller gave up, or the client is closing: not Redis's doing.
		done(errExcluded)
	default:
		h.lastErr.Store(&err)
		done(err)
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

// isReply reports whether err is a reply of Redis (redis.Nil included)
// rather than a failure to get one.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

func (h *breakerHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		// A dial belongs to a command that the breaker let through, or
		// is the pool's own; while the breaker is open, do not wait for
		// one.
		if h.cb.State() == gobreaker.StateOpen {
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
	err = next(context.WithValue(cctx, inCall{}, true))
	reported = true
	h.report(ctx, done, err)
	return err
}

func (h *breakerHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(inCall{}) != nil {
			return next(ctx, cmd)
		}
		err := h.call(ctx, func(ctx context.Context) error { return next(ctx, cmd) })
		if isRejection(err) {
			cmd.SetErr(err)
		}
		return err
	}
}

func (h *breakerHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(inCall{}) != nil {
			return next(ctx, cmds)
		}
		err := h.call(ctx, func(ctx context.Context) error { return next(ctx, cmds) })
		if isRejection(err) {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
		}
		return err
	}
}

// onStateChange runs under the breaker's lock, once per transition.
func (h *breakerHook) onStateChange(_ string, from, to gobreaker.State) {
	h.metrics.breakerChanged(to)
	switch {
	case from == gobreaker.StateClosed && to == gobreaker.StateOpen:
		h.openedAt = time.Now()
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
		h.log.Info("redis recovered: circuit breaker closed",
			zap.String("addr", h.addr),
			zap.Duration("unavailable_for", time.Since(h.openedAt).Round(time.Millisecond)))
	default: // a probe is let through, or failed: the same outage
		h.log.Debug("redis circuit breaker",
			zap.Stringer("from", from), zap.Stringer("to", to))
	}
}
