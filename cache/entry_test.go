package cache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestEntryState(t *testing.T) {
	t0 := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	withStale := &Entry{Expires: t0.Add(10 * time.Second), StaleUntil: t0.Add(30 * time.Second)}
	noStale := &Entry{Expires: t0.Add(10 * time.Second)}
	staleBeforeExpiry := &Entry{Expires: t0.Add(10 * time.Second), StaleUntil: t0.Add(5 * time.Second)}
	immutable := &Entry{StaleUntil: t0} // StaleUntil is ignored without Expires
	cases := []struct {
		name string
		e    *Entry
		at   time.Duration
		want State
	}{
		{"fresh at store time", withStale, 0, Fresh},
		{"fresh just before Expires", withStale, 10*time.Second - 1, Fresh},
		{"stale at Expires", withStale, 10 * time.Second, Stale},
		{"stale just before StaleUntil", withStale, 30*time.Second - 1, Stale},
		{"missing at StaleUntil", withStale, 30 * time.Second, Missing},
		{"no stale window: missing at Expires", noStale, 10 * time.Second, Missing},
		{"StaleUntil before Expires: no stale window", staleBeforeExpiry, 10 * time.Second, Missing},
		{"immutable is fresh forever", immutable, 100 * 365 * 24 * time.Hour, Fresh},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.e.state(t0.Add(tc.at)))
		})
	}
}

// TestLifetimeEntry checks the entries that the tests build with lifetime.
func TestLifetimeEntry(t *testing.T) {
	now := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	body := []byte("{}")
	cases := []struct {
		name string
		l    lifetime
		want Entry
	}{
		{"zero value is immutable", lifetime{}, Entry{Body: body, Status: 200, Stored: now}},
		{"stale ignored for immutable", lifetime{Stale: time.Minute}, Entry{Body: body, Status: 200, Stored: now}},
		{"ttl only", lifetime{TTL: 500 * time.Millisecond},
			Entry{Body: body, Status: 200, Stored: now, Expires: now.Add(500 * time.Millisecond)}},
		{"ttl and stale window", lifetime{TTL: 300 * time.Second, Stale: time.Hour},
			Entry{Body: body, Status: 200, Stored: now, Expires: now.Add(300 * time.Second), StaleUntil: now.Add(300*time.Second + time.Hour)}},
		{"negative ttl is not stored", lifetime{TTL: -1}, Entry{Body: body, Status: 200, Stored: now, NoStore: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, *tc.l.entry(now, 200, body))
		})
	}
}

func TestStrings(t *testing.T) {
	assert.Equal(t, []string{"missing", "fresh", "stale", "unknown"},
		[]string{Missing.String(), Fresh.String(), Stale.String(), State(9).String()})
	assert.Equal(t, []string{"hit", "miss", "coalesced", "stale", "stale_error", "unknown"},
		[]string{Hit.String(), Miss.String(), Coalesced.String(), StaleHit.String(), StaleError.String(), Outcome(9).String()})
}

// TestKind: an entry's value is reached through its kind only, and its
// cost counts against MaxBytes with the entry.
func TestKind(t *testing.T) {
	type view struct{ n int }
	views := Kind[*view]{Cost: func(v *view, e *Entry) int64 { return int64(v.n + len(e.Body)) }}
	var stamps Kind[int64]

	e := views.With(&Entry{Body: []byte("abc")}, &view{n: 100})
	v, ok := views.Value(e)
	assert.True(t, ok)
	assert.Equal(t, 100, v.n)
	_, ok = stamps.Value(e)
	assert.False(t, ok, "another kind's value is not this kind's")
	assert.Equal(t, int64(1+3+EntryOverhead+103), cost("k", e), "key, body, overhead and the value's cost")

	s := newTestStore(t, newFakeClock(), nil)
	s.Set("k", e)
	s.Wait()
	assert.Equal(t, int64(1+3+103+EntryOverhead), s.Bytes())

	ts, ok := stamps.Value(stamps.With(&Entry{}, 1718885772))
	assert.True(t, ok)
	assert.Equal(t, int64(1718885772), ts)
}
