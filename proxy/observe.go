package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/auth"
)

// reqState is what the layers of one request learn, for the access log and
// the metrics. It lives in the request's context.
type reqState struct {
	id        string
	network   string
	endpoint  string
	team      string
	keyID     string
	cache     string       // X-Cache value, when a cache was consulted
	upstream  atomic.Int32 // upstream calls this request caused
	authError string       // reason, when authentication failed

	route     *route          // matched by checkRequest
	principal *auth.Principal // set by authenticate; nil for an unsigned request
	verified  auth.Result     // what authenticate checked, for record
}

type stateKey struct{}

// upstreamCall counts an upstream call made for this request (a fill may
// still run after the request ended, hence atomic).
func (st *reqState) upstreamCall() { st.upstream.Add(1) }

func stateOf(ctx context.Context) *reqState {
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return st
	}
	return &reqState{}
}

// statusWriter records the status written through it. It passes Flush and
// Hijack on, so streaming and WebSocket upgrades keep working.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
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
		return h.Hijack()
	}
	return nil, nil, errors.New("proxy: connection does not support hijacking")
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// observe is the outermost middleware of a network: it recovers from panics
// (answering 500), gives the request an ID, and writes one access log line
// and the request metrics when the request ends.
func observe(network string, log *zap.Logger, m *Metrics, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		st := &reqState{id: requestID(r), network: network, endpoint: endpointOf(r)}
		sw := &statusWriter{ResponseWriter: w}
		sw.Header().Set("X-Request-Id", st.id)
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				log.Error("panic serving request", zap.String("request_id", st.id), zap.Any("panic", p), zap.Stack("stack"))
				if sw.status == 0 {
					writeError(sw, errorf(http.StatusInternalServerError, "internal error"))
				}
			}
			d := time.Since(start)
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			if r.Context().Err() != nil && status >= 500 {
				status = 499 // the client went away; not the upstream's fault
			}
			team := st.team
			if team == "" {
				team = "anonymous"
			}
			m.request(network, st.endpoint, status, team, d)
			if ce := log.Check(zap.InfoLevel, "request"); ce != nil {
				fields := []zap.Field{
					zap.String("request_id", st.id),
					zap.String("network", network),
					zap.String("method", r.Method),
					zap.String("endpoint", st.endpoint),
					zap.Int("status", status),
					zap.Duration("duration", d),
					zap.Int("bytes", sw.bytes),
					zap.Int32("upstream_calls", st.upstream.Load()),
				}
				if st.team != "" {
					fields = append(fields, zap.String("team", st.team), zap.String("key_id", st.keyID))
				}
				if st.cache != "" {
					fields = append(fields, zap.String("cache", st.cache))
				}
				if st.authError != "" {
					fields = append(fields, zap.String("auth_error", st.authError))
				}
				ce.Write(fields...)
			}
		}()
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), stateKey{}, st)))
	})
}

// requestID keeps a sane incoming X-Request-Id, else makes one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 64 {
		ok := true
		for i := 0; i < len(id) && ok; i++ {
			c := id[i]
			ok = c == '-' || c == '_' || c == '.' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		}
		if ok {
			return id
		}
	}
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
