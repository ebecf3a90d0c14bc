package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"streamgate/auth"
)

// TestMain runs the hit scenario's server processes, which are this test
// binary started again with childEnv set.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		if err := runChild(role, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// The bare HMAC server accepts what the gateway's scheme signs, and
// refuses a wrong signature, an unknown key and a stale timestamp.
func TestHMACHandler(t *testing.T) {
	id, secret := benchKey("c", 0)
	target := "/api/v1/reports/latest?feedID=0x01"
	answers := map[string]*childAnswer{target: {Status: http.StatusOK, Header: http.Header{"X-Cache": {"HIT"}}, Body: []byte(`{"report":{}}`)}}
	h := hmacHandler(map[string][]byte{id: []byte(secret)}, 5*time.Second, bareHandler(answers))
	for _, tc := range []struct {
		name        string
		key, secret string
		at          time.Time
		want        int
	}{
		{"signed", id, secret, time.Now(), http.StatusOK},
		{"wrong secret", id, "not-the-secret", time.Now(), http.StatusUnauthorized},
		{"unknown key", "nope", secret, time.Now(), http.StatusUnauthorized},
		{"stale", id, secret, time.Now().Add(-time.Minute), http.StatusUnauthorized},
	} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		auth.Sign(r, tc.key, []byte(tc.secret), tc.at)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, tc.want, w.Code, tc.name)
		if tc.want == http.StatusOK {
			assert.Equal(t, "HIT", w.Header().Get("X-Cache"))
			assert.Equal(t, `{"report":{}}`, w.Body.String())
		}
	}
}

// discardWriter keeps nothing; its header map is cleared for each request.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// BenchmarkBareHMACHandler is the bare HMAC server's handler in-process,
// with the harness of proxy's BenchmarkGatewayHitCost (one signed request,
// a writer that keeps nothing): the floor the gateway's handler is
// compared with in BENCHMARKS.md.
func BenchmarkBareHMACHandler(b *testing.B) {
	id, secret := benchKey("c", 0)
	target := "/api/v1/reports/latest?feedID=0x01"
	header := http.Header{"X-Cache": {"HIT"}, "Content-Type": {"application/json"}, "Cache-Control": {"private, max-age=3600"}}
	answers := map[string]*childAnswer{target: {Status: http.StatusOK, Header: header, Body: make([]byte, 1647)}}
	h := hmacHandler(map[string][]byte{id: []byte(secret)}, time.Hour, bareHandler(answers))
	r := httptest.NewRequest(http.MethodGet, target, nil)
	auth.Sign(r, id, []byte(secret), time.Now())
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
}
