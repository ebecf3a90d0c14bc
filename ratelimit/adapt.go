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
// (the upstream counts differently, or its limit is lower). Every rule
// below is relative to the rate in force, never to the configured one, so
// that a budget configured 10, 100 or 1000 times too high converges as
// fast as one configured right:
//
//   - After a 429 (Throttled) the rate in force halves from the rate the
//     budget was actually granting when it came (the observed rate: calls
//     granted in the last busy second, when lower than the rate in force),
//     and a ceiling is set one step (a tenth) below that observed rate.
//     Further 429s within adaptHold are the echo of calls sent before the
//     slowdown and do not slow again.
//   - While no 429 comes back the rate climbs one step (a tenth of the
//     ceiling) every adaptRecoverEvery, up to the ceiling; the ceiling
//     itself rises a tenth every adaptCeilingEvery without a 429, up to
//     the configured rate.
//   - The rate in force is never below the floor: the configured rate
//     divided by adaptFloorDiv, or adaptFloorRPS (1 call a second) if that
//     is lower. So any upstream limit of at least 1 call a second is
//     reachable from any configured rate.
//
// So a gateway facing a lower limit than configured converges below it in
// a few 429s (each halves the rate it actually sent) and stays there,
// probing upwards by a tenth at most once a minute; one facing its
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
	// adaptSteps is the number of steps of the ceiling: a step is a tenth
	// of it.
	adaptSteps = 10
	// adaptFloorDiv and adaptFloorRPS bound the slowdown: the rate in
	// force is never below the configured rate divided by adaptFloorDiv,
	// nor, when that is lower, below adaptFloorRPS.
	adaptFloorDiv = 32
	adaptFloorRPS = 1.0
	// adaptObserve is the span of the observed rate: the gaps between
	// granted calls are summed over about that much busy time (halved
	// when they exceed it), and a gap as long is a quiet spell (or a
	// pause), not counted.
	adaptObserve = time.Second
	// adaptObserveMin is the number of gaps the observed rate needs
	// before a slowdown trusts it.
	adaptObserveMin = 3
	// adaptTTL is how long Redis keeps a key's state after its last
	// change; a state left alone that long is back to the configured rate
	// anyway.
	adaptTTL = 10 * time.Minute
)

// adaptFloor is the lowest rate in force under the configured rate.
func adaptFloor(rate float64) float64 {
	return math.Min(rate/adaptFloorDiv, adaptFloorRPS)
}

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
	seen    observed  // the rate actually granted
}

// observed is the rate at which a key's calls were actually granted: the
// number of gaps between granted calls (their times of departure) over
// their sum, both halved whenever the sum exceeds adaptObserve, so that it
// reflects about the last busy second. A gap of adaptObserve or more (a
// quiet spell, a pause) is not counted.
type observed struct {
	last time.Time // the departure of the last granted call
	sum  float64   // seconds
	n    float64
}

// granted counts a call granted to depart at at (at may be later than
// the previous one's, or, on a busy machine, earlier: a gap < 0 counts 0).
func (o *observed) granted(at time.Time) {
	if !o.last.IsZero() {
		if gap := at.Sub(o.last).Seconds(); gap < adaptObserve.Seconds() {
			o.sum += math.Max(gap, 0)
			o.n++
			if o.sum > adaptObserve.Seconds() {
				o.sum, o.n = o.sum/2, o.n/2
			}
		}
	}
	if at.After(o.last) {
		o.last = at
	}
}

// rate is the observed rate, or 0 when too few gaps were seen.
func (o *observed) rate() float64 {
	if o.n < adaptObserveMin || o.sum <= 0 {
		return 0
	}
	return o.n / o.sum
}

// at brings a up to date at now under the configured rate, and returns the
// rate in force and DirectionUp if it climbed ("" otherwise).
func (a *adaptive) at(rate float64, now time.Time) (float64, string) {
	if a.rate != rate || a.eff <= 0 {
		*a = adaptive{rate: rate, eff: rate, ceil: rate, seen: a.seen}
		return rate, ""
	}
	if a.rest() {
		return rate, ""
	}
	if a.ceil < rate {
		since := a.down
		if a.lifted.After(since) {
			since = a.lifted
		}
		if n := int64(now.Sub(since) / adaptCeilingEvery); n > 0 {
			a.ceil = math.Min(rate, a.ceil*math.Pow(1+1.0/adaptSteps, float64(n)))
			a.lifted = now
		}
	}
	dir := ""
	if a.eff < a.ceil {
		if n := int64(now.Sub(a.changed) / adaptRecoverEvery); n > 0 {
			a.eff = math.Min(a.ceil, a.eff+float64(n)*a.ceil/adaptSteps)
			a.changed = now
			dir = DirectionUp
		}
	}
	return a.eff, dir
}

// throttle takes an upstream 429 at now into account: the rate in force
// halves from the observed rate, when known and lower, and the ceiling
// goes a step below it. It returns the rate in force and the direction of
// the change, if any: DirectionDown, or DirectionUp when the 429 came
// within adaptHold of the last slowdown and only a recovery due was
// applied.
func (a *adaptive) throttle(rate float64, now time.Time) (float64, string) {
	eff, dir := a.at(rate, now)
	if !a.down.IsZero() && now.Sub(a.down) < adaptHold {
		return eff, dir
	}
	floor, base := adaptFloor(rate), a.eff
	if seen := a.seen.rate(); seen > 0 && seen < base {
		base = seen
	}
	a.ceil = math.Max(floor, base-base/adaptSteps)
	a.eff = math.Max(floor, base/2)
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
		msg = "upstream budget slowed after an upstream 429: the rate in force halves from the rate granted and recovers step by step"
	}
	log.Info(msg, zap.String("network", network), zap.String("endpoint", key),
		zap.Float64("effective_rps", eff), zap.Float64("rps", rate))
}
