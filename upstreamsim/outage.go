package upstreamsim

import (
	"net/http"
	"time"
)

// Outage makes both networks unreachable for d, from now: every open
// WebSocket connection is dropped abruptly (no close frame), and every
// API request, REST or WebSocket upgrade, that arrives before the outage
// ends is answered 503 with Retry-After: 1 before anything else is
// checked. The reports of the outage's seconds are published as usual:
// once it ends, REST serves them and the WebSocket streams go on from the
// current second. A later call replaces the end (d <= 0 ends an outage
// now). It returns the number of WebSocket connections dropped.
//
// The outage runs on the wall clock (time.Now), not on Config.Now: it is
// a fault of the service, not of the report window.
func (s *Simulator) Outage(d time.Duration) int {
	end := time.Now().Add(d)
	s.faults.outageEnd.Store(&end)
	if d <= 0 {
		return 0
	}
	return s.DropWS(WSDrop{Abrupt: true})
}

// OutageLeft returns how long the current outage lasts; zero when there is
// none.
func (s *Simulator) OutageLeft() time.Duration { return s.faults.left() }

// left is the rest of the outage under way, zero when none is.
func (fs *faultState) left() time.Duration {
	end := fs.outageEnd.Load()
	if end == nil {
		return 0
	}
	return max(time.Until(*end), 0)
}

// refuseOutage answers r 503 when an outage is under way, and reports
// whether it did.
func (fs *faultState) refuseOutage(w *countingWriter, catalogStyle bool) bool {
	if fs.left() <= 0 {
		return false
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "service unavailable (injected outage)", catalogStyle)
	return true
}
