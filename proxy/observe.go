package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"streamgate/auth"
	"streamgate/internal/apierror"
)

// reqState is the scope of one request: what its layers learn (route,
// principal, verified signature, labels) for the next layer, the access
// log and the metrics. It lives in the request's context, made once by
// observe with the request's own storage: its status writer, its context
// (no context.WithValue), its access log field, and its answer's room (see
// answerRoom), so that a hit allocates the state and, for its context, one
// copy of the request, and nothing else of its own. A fill never holds a
// reqState: it is given the request's call counter (calls), so a fill that
// outlives its request keeps none of the request's storage alive.
type reqState struct {
	id        string
	network   string
	endpoint  string
	team      string
	keyID     string
	cache     string     // X-Cache value, when a cache was consulted
	calls     *callCount // upstream calls this request caused; nil: none yet
	reports   int        // reports its answer delivered (the usage ledger's)
	usage     UsageRecorder
	usageDone bool   // recorded in the ledger at its upgrade (upgraded)
	authError string // reason, when authentication failed

	route     *route          // matched by checkRequest
	principal *auth.Principal // set by authenticate; nil for an unsigned request
	verified  auth.Result     // what authenticate checked, for record
	// sharedRecorded: admission recorded the signature in the shared
	// replay record in its script call; record keeps it locally only.
	sharedRecorded bool

	start  time.Time
	now    time.Time // the network's clock, read once (reqState.clock)
	method string
	status int // the status logged and counted
	dur    time.Duration

	sw     statusWriter
	ctx    stateCtx
	fields [1]zap.Field
	room   answerRoom
	span   trace.Span   // the server span; nil when tracing is off or not started yet
	tracer trace.Tracer // makes the server span (startServerSpan); nil: tracing off
}

// callCount counts the upstream calls made for one request. It is the
// only part of a request a fill keeps: a fill may still run, and count,
// after its request ended. A nil *callCount counts nothing (the
// refresher's calls, made for no request).
type callCount struct {
	n             atomic.Int32
	usage         UsageRecorder // nil: no ledger
	network, team string        // whom the ledger counts the calls to
}

func (c *callCount) add() {
	if c != nil {
		c.n.Add(1)
		if c.usage != nil {
			c.usage.UpstreamCall(c.network, c.team)
		}
	}
}

func (c *callCount) load() int32 {
	if c == nil {
		return 0
	}
	return c.n.Load()
}

// counter returns the request's call counter, made at its first use (on
// a miss, never on a hit).
func (st *reqState) counter() *callCount {
	if st.calls == nil {
		st.calls = &callCount{usage: st.usage, network: st.network, team: st.team}
	}
	return st.calls
}

// answerRoom is the room of a request's answer: its header values and
// their bytes, written into the request's own storage instead of being
// allocated. net/http reads them after the handler returns, so the room
// is never reused.
type answerRoom struct {
	vals  [11]string // header values: h[key] = vals[i:i+n:i+n]
	nvals int
	text  textBuf // header values' bytes
}

// stateCtx is the request's context with its reqState, without the
// allocation of context.WithValue.
type stateCtx struct {
	context.Context
	st *reqState
}

func (c *stateCtx) Value(key any) any {
	if _, ok := key.(stateKey); ok {
		return c.st
	}
	return c.Context.Value(key)
}

type stateKey struct{}

// fillContext is the context a request's cache loads are made with: the
// request's own (its cancellation and deadline, net/http's values) without
// its reqState. The Store runs a fill on a context detached from the
// callers' that keeps their values, so a fill that outlives its request
// keeps none of the request's storage alive; it is given what it needs
// (its callCount) instead.
func fillContext(ctx context.Context) context.Context {
	if c, ok := ctx.(*stateCtx); ok {
		return c.Context
	}
	return ctx
}

func stateOf(ctx context.Context) *reqState {
	if c, ok := ctx.(*stateCtx); ok {
		return c.st
	}
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return st
	}
	return &reqState{}
}

// clock returns the time of now, read once per request: the layers of a
// request share one reading of the network's clock.
func (st *reqState) clock(now func() time.Time) time.Time {
	if st.now.IsZero() {
		st.now = now()
	}
	return st.now
}

// setHeader sets h[key] to values, the slice taken from the room while
// it has space. The slice is full (len == cap), so that an Add to the
// same key copies it rather than writing into the room.
func (a *answerRoom) setHeader(h http.Header, key string, values ...string) {
	n := len(values)
	if n == 0 || a.nvals+n > len(a.vals) {
		h[key] = append([]string(nil), values...)
		return
	}
	i := a.nvals
	copy(a.vals[i:], values)
	a.nvals += n
	h[key] = a.vals[i : i+n : i+n]
}

// setInt sets h[key] to prefix followed by v in decimal, its bytes written
// into the room.
func (a *answerRoom) setInt(h http.Header, key, prefix string, v int64) {
	b := append(a.text.room(), prefix...)
	a.setHeader(h, key, a.text.take(strconv.AppendInt(b, v, 10)))
}

// textBuf is room for the bytes of a request's header values. Each string
// it returns is written once and never changed: the answerRoom that holds
// the buffer is never reused.
type textBuf struct {
	b [128]byte
	n int
}

// room returns the unused part of the buffer, empty and with its capacity,
// to append to.
func (t *textBuf) room() []byte { return t.b[t.n:t.n:len(t.b)] }

// take makes a string of b, the result of appending to room(): it takes
// the bytes in place when b still lies in the buffer, else copies them.
func (t *textBuf) take(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if cap(b) == len(t.b)-t.n && &b[:1][0] == &t.b[t.n] {
		t.n += len(b)
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

// statusWriter records the status written through it. It passes Flush and
// Hijack on, so streaming and WebSocket upgrades keep working.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
	owner  *reqState // the request, for the usage ledger's record at an upgrade
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		if w.status == 0 {
			w.status = http.StatusSwitchingProtocols
		}
		w.owner.upgraded()
		return h.Hijack()
	}
	return nil, nil, errors.New("proxy: connection does not support hijacking")
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe is the outermost middleware of a network: it recovers from panics
// (answering 500), gives the request an ID, and writes one access log line
// and the request metrics when the request ends.
func observe(network string, log *zap.Logger, m *Metrics, u UsageRecorder, tr trace.Tracer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := &reqState{start: time.Now(), network: network, method: r.Method, usage: u}
		st.route, st.endpoint = routeOf(r)
		st.id = requestID(r, &st.room.text)
		st.sw.ResponseWriter, st.sw.owner = w, st
		st.tracer = tr // the server span starts once the request is authenticated
		st.ctx = stateCtx{Context: r.Context(), st: st}
		sw := &st.sw
		st.room.setHeader(sw.Header(), "X-Request-Id", st.id)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("panic serving request", zap.String("request_id", st.id), zap.Any("panic", p), zap.Stack("stack"))
				if sw.status == 0 {
					writeError(sw, apierror.New(http.StatusInternalServerError, "internal error"))
				}
			}
			st.dur = time.Since(st.start)
			st.status = sw.status
			if st.status == 0 {
				st.status = http.StatusOK
			}
			if r.Context().Err() != nil && st.status >= 500 {
				st.status = 499 // the client went away; not the upstream's fault
			}
			st.startServerSpan(r, false) // refused before authenticator let it through
			m.request(network, st.endpoint, st.status, st.team, st.dur, traceIDOf(st.span))
			recordUsage(u, st)
			if st.span != nil {
				endServerSpan(st)
			}
			if ce := log.Check(zap.InfoLevel, "request"); ce != nil {
				st.fields[0] = zap.Inline(st)
				ce.Write(st.fields[:]...)
			}
		}()
		next.ServeHTTP(sw, r.WithContext(&st.ctx))
	})
}

// MarshalLogObject writes the fields of the access log line of the request.
func (st *reqState) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("request_id", st.id)
	enc.AddString("network", st.network)
	enc.AddString("method", st.method)
	enc.AddString("endpoint", st.endpoint)
	enc.AddInt("status", st.status)
	enc.AddDuration("duration", st.dur)
	enc.AddInt("bytes", st.sw.bytes)
	enc.AddInt32("upstream_calls", st.calls.load())
	if st.team != "" {
		enc.AddString("team", st.team)
		enc.AddString("key_id", st.keyID)
	}
	if st.cache != "" {
		enc.AddString("cache", st.cache)
	}
	if st.authError != "" {
		enc.AddString("auth_error", st.authError)
	}
	if st.span != nil {
		if sc := st.span.SpanContext(); sc.IsValid() {
			enc.AddString("trace_id", sc.TraceID().String())
		}
	}
	return nil
}

// requestID keeps a sane incoming X-Request-Id, else makes one of 96
// random bits in hex, written into t. The ID correlates log lines; it is
// no secret, so the runtime's fast generator serves.
func requestID(r *http.Request, t *textBuf) string {
	if v := r.Header["X-Request-Id"]; len(v) > 0 && v[0] != "" && len(v[0]) <= 64 {
		id := v[0]
		ok := true
		for i := 0; i < len(id) && ok; i++ {
			c := id[i]
			ok = c == '-' || c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		}
		if ok {
			return id
		}
	}
	var raw [12]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(raw[8:], rand.Uint32())
	return t.take(hex.AppendEncode(t.room(), raw[:]))
}
