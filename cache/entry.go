package cache

import "time"

// Entry is one cached response.
//
// An Entry is immutable once it has been handed to Set or returned by a fill:
// the Store shares one *Entry among all readers, so callers must not modify
// it, and in particular must not modify or append to Body.
type Entry struct {
	// Body is the response body, served as is.
	Body []byte
	// Status is the response status code.
	Status int
	// Stored is when the response was obtained (for an Age header). The
	// Store does not interpret it.
	Stored time.Time
	// Expires is when the entry stops being fresh. The zero time means never:
	// the entry is immutable and is kept until it is evicted for space.
	Expires time.Time
	// StaleUntil is when an expired entry stops being served stale (by
	// stale-while-revalidate and stale-if-error). It is ignored when Expires
	// is zero; a value not after Expires means no stale serving at all.
	StaleUntil time.Time
	// value, if non-nil, is a parsed form of Body kept with it (a catalog
	// view indexed for filtering), so that it is parsed once per fill and
	// dropped with the entry; it is set and read through its Kind, and
	// readers treat it as immutable. valueCost is what it holds in memory,
	// in bytes, counted against the store's MaxBytes with the body.
	value     any
	valueCost int64
	// NoStore marks a fill result that answers the callers waiting for that
	// fill but is not cached (for example an upstream answer that must not
	// be reused). Set ignores such entries.
	NoStore bool
}

// State is the state of a cached entry at a given time.
type State int

const (
	// Missing: no entry, or one past its StaleUntil.
	Missing State = iota
	// Fresh: an entry before its Expires, or an immutable one.
	Fresh
	// Stale: an entry past its Expires but before its StaleUntil.
	Stale
)

func (s State) String() string {
	switch s {
	case Missing:
		return "missing"
	case Fresh:
		return "fresh"
	case Stale:
		return "stale"
	}
	return "unknown"
}

// state is the state of e at now.
func (e *Entry) state(now time.Time) State {
	switch {
	case e.Expires.IsZero() || now.Before(e.Expires):
		return Fresh
	case now.Before(e.StaleUntil):
		return Stale
	}
	return Missing
}
