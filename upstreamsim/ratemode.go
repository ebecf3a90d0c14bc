package upstreamsim

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// RateMode is how the simulator counts the requests of its rate limit
// (Config.RateLimit, per key, endpoint and network). The real service
// publishes its limit (10 per second) but not how it counts; a client that
// holds under every mode holds under the service.
type RateMode int

const (
	// RateBucket is a token bucket of RateLimit tokens per second and
	// Config.Burst tokens at most. With a burst of 1 (Default) it is the
	// strictest mode: it refuses any two requests closer than 1/RateLimit.
	RateBucket RateMode = iota
	// RateCalendar counts the requests of each calendar second of Now: at
	// most RateLimit (rounded down, at least 1) from one whole second to
	// the next.
	RateCalendar
	// RateSliding counts the requests of the last second: a request is
	// refused when RateLimit (rounded down, at least 1) requests were
	// accepted less than a second before it.
	RateSliding
)

// rateModeNames are the names of String and ParseRateMode.
var rateModeNames = [...]string{RateBucket: "bucket", RateCalendar: "calendar", RateSliding: "sliding"}

// String returns "bucket", "calendar" or "sliding", the names ParseRateMode
// accepts.
func (m RateMode) String() string {
	if m >= 0 && int(m) < len(rateModeNames) {
		return rateModeNames[m]
	}
	return fmt.Sprintf("RateMode(%d)", int(m))
}

// ParseRateMode parses "bucket", "calendar" or "sliding".
func ParseRateMode(s string) (RateMode, error) {
	for m, name := range rateModeNames {
		if s == name {
			return RateMode(m), nil
		}
	}
	return 0, fmt.Errorf("simulator: rate mode %q is none of bucket, calendar, sliding", s)
}

// counter counts the requests of one key and endpoint. Callers serialise
// its calls.
type counter interface {
	// allow reports whether a request at now is within the limit, and
	// counts it if so.
	allow(now time.Time) bool
}

func newCounter(mode RateMode, limit rate.Limit, burst int) counter {
	n := max(1, int(math.Min(math.Floor(float64(limit)), 1e6)))
	switch mode {
	case RateCalendar:
		return &calendarCounter{limit: n}
	case RateSliding:
		return &slidingCounter{times: make([]time.Time, n)}
	}
	return bucketCounter{rate.NewLimiter(limit, burst)}
}

type bucketCounter struct{ lim *rate.Limiter }

func (c bucketCounter) allow(now time.Time) bool { return c.lim.AllowN(now, 1) }

// calendarCounter counts per whole second of Unix time.
type calendarCounter struct {
	limit  int
	second int64
	n      int
}

func (c *calendarCounter) allow(now time.Time) bool {
	if s := now.Unix(); s != c.second {
		c.second, c.n = s, 0
	}
	if c.n >= c.limit {
		return false
	}
	c.n++
	return true
}

// slidingCounter keeps the times of the last len(times) accepted requests
// in a ring: a request is accepted when the oldest of them is at least a
// second old.
type slidingCounter struct {
	times []time.Time
	next  int // the oldest
}

func (c *slidingCounter) allow(now time.Time) bool {
	if oldest := c.times[c.next]; !oldest.IsZero() && now.Sub(oldest) < time.Second {
		return false
	}
	c.times[c.next] = now
	c.next = (c.next + 1) % len(c.times)
	return true
}
