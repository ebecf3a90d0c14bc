package ratelimit

import (
	"math"
	"time"

	"go.uber.org/zap"
)

// Learning from upstream 429s.
//
// A Budget spends a rate it has reason to believe the upstream allows; an
// upstream 429 is proof that it does not, whatever the configuration says
// (the upstream counts differently, or its limit is lower). After a 429
// (Throttled) the key's rate in force halves, and a ceiling is set one step
// below the rate that drew it. While no 429 comes back the rate climbs one
// step (a tenth of the configured rate) every adaptRecoverEvery, up to the
// ceiling; the ceiling itself rises one step every adaptCeilingEvery
// without a 429, up to the configured rate. So a gateway facing a lower
// limit than configured converges below it after a few 429s and stays
// there, and probes upwards again at most once a minute; one facing its
// configured limit after a passing 429 (a jitter of the network) is back
// to it within seconds. The memory and the Redis implementations apply the
// same rules (the Redis one in its script, on Redis's clock, so that every
// replica shares one state per key).
const (
	// adaptHold is how long after a slowdown further 429s are taken for
	// the echo of calls sent before it, and do not slow again.
	adaptHold = time.Second
	// adaptRecoverEvery is how long without a 429 (and without another
	// change) before the rate climbs one step.
	adaptRecoverEvery = 2 * time.Second
	// adaptCeilingEvery is how long without a 429 before the ceiling
	// rises one step.
	adaptCeilingEvery = time.Minute
	// adaptSteps is the number of steps of the configured rate.
	adaptSteps = 10
	// adaptFloorDiv bounds the slowdown: the rate in force is never below
	// the configured rate divided by this.
	adaptFloorDiv = 32
	// adaptTTL is how long Redis keeps a key's state after its last
	// change; a state left alone that long is back to the configured rate
	// anyway.
	adaptTTL = 10 * time.Minute
)

// Directions of a change of the rate in force: the "direction" label of
// streamgate_upstream_budget_adjustments_total.
const (
	DirectionDown = "down"
	DirectionUp   = "up"
)

// adaptive is the learned state of one key in memory. Its zero value is
// a key at its configured rate.
type adaptive struct {
	rate    float64   // the configured rate this state was learned under
	eff     float64   // the rate in force
	ceil    float64   // the most the rate in force recovers to
	changed time.Time // the last change of eff
	down    time.Time // the last slowdown
	lifted  time.Time // the last rise of the ceiling
}

// at brings a up to date at now under the configured rate, and returns the
// rate in force and DirectionUp if it climbed ("" otherwise).
func (a *adaptive) at(rate float64, now time.Time) (float64, string) {
	if a.rate != rate || a.eff <= 0 {
		*a = adaptive{rate: rate, eff: rate, ceil: rate}
		return rate, ""
	}
	if a.rest() {
		return rate, ""
	}
	step := rate / adaptSteps
	if a.ceil < rate {
		since := a.down
		if a.lifted.After(since) {
			since = a.lifted
		}
		if n := int64(now.Sub(since) / adaptCeilingEvery); n > 0 {
			a.ceil = math.Min(rate, a.ceil+float64(n)*step)
			a.lifted = now
		}
	}
	dir := ""
	if a.eff < a.ceil {
		if n := int64(now.Sub(a.changed) / adaptRecoverEvery); n > 0 {
			a.eff = math.Min(a.ceil, a.eff+float64(n)*step)
			a.changed = now
			dir = DirectionUp
		}
	}
	return a.eff, dir
}

// throttle takes an upstream 429 at now into account. It returns the rate
// in force and the direction of the change, if any: DirectionDown, or
// DirectionUp when the 429 came within adaptHold of the last slowdown and
// only a recovery due was applied.
func (a *adaptive) throttle(rate float64, now time.Time) (float64, string) {
	eff, dir := a.at(rate, now)
	if !a.down.IsZero() && now.Sub(a.down) < adaptHold {
		return eff, dir
	}
	step, floor := rate/adaptSteps, rate/adaptFloorDiv
	a.ceil = math.Max(floor, a.eff-step)
	a.eff = math.Max(floor, a.eff/2)
	a.ceil = math.Max(a.ceil, a.eff)
	a.down, a.changed = now, now
	return a.eff, DirectionDown
}

// rest reports whether a is at its configured rate with nothing learned.
func (a *adaptive) rest() bool {
	return a.eff >= a.rate && a.ceil >= a.rate
}

// adjusted records a change of key's rate in force: the counter, and one
// log line per change.
func adjusted(log *zap.Logger, m *Metrics, network, key, dir string, rate, eff float64) {
	if dir == "" {
		return
	}
	m.budgetAdjusted(network, key, dir)
	if log == nil {
		return
	}
	msg := "upstream budget recovering: no upstream 429 for a while, the rate in force climbs a step"
	if dir == DirectionDown {
		msg = "upstream budget slowed after an upstream 429: the rate in force halves and recovers step by step"
	}
	log.Info(msg, zap.String("network", network), zap.String("endpoint", key),
		zap.Float64("effective_rps", eff), zap.Float64("rps", rate))
}
