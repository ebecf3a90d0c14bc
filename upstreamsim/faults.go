package upstreamsim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Faults are failures injected into the API endpoints of both networks
// (never into the control handler). Shares are probabilities per request in
// [0, 1] whose sum is at most 1; the zero value injects nothing.
type Faults struct {
	// Latency delays every request; Jitter adds a uniform random delay in
	// [0, Jitter). A client that gives up during the delay gets nothing.
	Latency time.Duration
	Jitter  time.Duration
	// ErrorRate is the share of requests answered 500, 502 or 503, chosen
	// evenly.
	ErrorRate float64
	// Hang is the share of requests that get no response until the client
	// gives up (its request context ends) or the Simulator is closed; then
	// the handler aborts with http.ErrAbortHandler, which makes the server
	// drop the connection without a response.
	Hang float64
	// Force429 is the share of requests answered 429 with Retry-After: 1.
	Force429 float64

	// The faults above apply to WebSocket upgrades as to any request; the
	// ones below only to /api/v1/ws. Dropping the open connections is an
	// action rather than a state: see DropWS.

	// WSStall stalls WebSocket connections, open and new, while it is set:
	// the simulator neither reads nor writes them, so they get no frames
	// and their pings no pongs (a blackholed path). An upgrade still gets
	// its 101. Bytes a client sends meanwhile are read when the stall ends,
	// and the reports of the stalled seconds follow (at most the last 10 of
	// each stream). A stalled connection stays open, and counts toward
	// Config.WSMaxConnsPerKey, until the stall ends, even if its client
	// has gone: a client that reconnects during a long stall can meet 429.
	WSStall bool
	// WSStallOrigin limits WSStall to the connections of one HA origin
	// (see Config.HAOrigins); "" stalls every connection.
	WSStallOrigin string
	// WSRefuse, when not zero, answers every WebSocket upgrade request with
	// this status (400-599), before the WebSocket handler checks anything;
	// 429 and 503 carry Retry-After: 1.
	WSRefuse int

	// Forge falsifies every report served while it is set, over REST and
	// the WebSocket (see Forgery): "signature", "outsider", "too_few",
	// "too_many", "duplicate", "unknown_digest", "relabel",
	// "duplicate_key", "duplicate_key_last", "trailing" or "oversize"; ""
	// serves reports as the DON signed them.
	Forge Forgery
}

// Validate reports every problem of f.
func (f Faults) Validate() error {
	var errs []error
	if f.Latency < 0 || f.Jitter < 0 {
		errs = append(errs, errors.New("simulator: fault latency and jitter must not be negative"))
	}
	for _, x := range []struct {
		name string
		v    float64
	}{{"ErrorRate", f.ErrorRate}, {"Hang", f.Hang}, {"Force429", f.Force429}} {
		if !(x.v >= 0 && x.v <= 1) {
			errs = append(errs, fmt.Errorf("simulator: fault share %s must be in [0, 1], got %v", x.name, x.v))
		}
	}
	if len(errs) == 0 && f.ErrorRate+f.Hang+f.Force429 > 1+1e-9 {
		errs = append(errs, errors.New("simulator: fault shares ErrorRate, Hang and Force429 must sum to at most 1"))
	}
	if f.WSRefuse != 0 && (f.WSRefuse < 400 || f.WSRefuse > 599) {
		errs = append(errs, fmt.Errorf("simulator: fault WSRefuse must be 0 or an HTTP status in 400-599, got %d", f.WSRefuse))
	}
	if f.Forge != "" && !slices.Contains(forgeries, f.Forge) {
		errs = append(errs, fmt.Errorf("simulator: fault Forge must be one of %v or empty, got %q", forgeries, f.Forge))
	}
	if f.WSStallOrigin != "" && !f.WSStall {
		errs = append(errs, errors.New("simulator: fault WSStallOrigin needs WSStall"))
	}
	return errors.Join(errs...)
}

// zero reports whether f injects nothing into a request (the WebSocket
// faults are applied by the WebSocket handler).
func (f Faults) zero() bool {
	return f.Latency == 0 && f.Jitter == 0 && f.ErrorRate == 0 && f.Hang == 0 && f.Force429 == 0
}

// faultsJSON is the wire form of Faults: durations as Go duration strings
// ("150ms"); a JSON number is read as nanoseconds.
type faultsJSON struct {
	Latency   jsonDuration `json:"latency"`
	Jitter    jsonDuration `json:"jitter"`
	ErrorRate float64      `json:"errorRate"`
	Hang      float64      `json:"hang"`
	Force429  float64      `json:"force429"`

	WSStall       bool   `json:"wsStall"`
	WSStallOrigin string `json:"wsStallOrigin"`
	WSRefuse      int    `json:"wsRefuse"`

	Forge Forgery `json:"forge"`
}

type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("simulator: duration must be a string such as \"150ms\" or nanoseconds: %s", b)
		}
		*d = jsonDuration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	*d = jsonDuration(v)
	return nil
}

// MarshalJSON writes durations as strings such as "150ms".
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		Latency: jsonDuration(f.Latency), Jitter: jsonDuration(f.Jitter),
		ErrorRate: f.ErrorRate, Hang: f.Hang, Force429: f.Force429,
		WSStall: f.WSStall, WSStallOrigin: f.WSStallOrigin, WSRefuse: f.WSRefuse, Forge: f.Forge,
	})
}

// UnmarshalJSON reads durations as strings or nanoseconds; absent fields
// are zero and unknown fields an error.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var w faultsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return fmt.Errorf("simulator: faults: %w", err)
	}
	*f = Faults{
		Latency: time.Duration(w.Latency), Jitter: time.Duration(w.Jitter),
		ErrorRate: w.ErrorRate, Hang: w.Hang, Force429: w.Force429,
		WSStall: w.WSStall, WSStallOrigin: w.WSStallOrigin, WSRefuse: w.WSRefuse, Forge: w.Forge,
	}
	return nil
}

// SetFaults replaces the injected faults; requests that arrive afterwards
// see them. An invalid f is refused and changes nothing.
func (s *Simulator) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.cur.Store(&f)
	s.ws.setStall(f)
	return nil
}

// Faults returns the injected faults.
func (s *Simulator) Faults() Faults { return *s.faults.cur.Load() }

// faultState is the trouble injected into the simulator's API: the faults
// every request sees and the end of an outage. The Simulator's control
// methods (SetFaults, Outage) set it; the API handler asks it, per request,
// whether the request goes on (inject, refuseOutage).
type faultState struct {
	cur       atomic.Pointer[Faults]
	outageEnd atomic.Pointer[time.Time] // see Simulator.Outage
	mu        sync.Mutex                // serialises SetFaults
	closed    <-chan struct{}           // the Simulator's: ends a fault's latency and hangs
}

// inject applies the faults to one request. It reports whether the
// request goes on; when it does not, the response (if any) is written and
// counted.
func (fs *faultState) inject(w *countingWriter, r *http.Request, catalogStyle bool) bool {
	f := fs.cur.Load()
	if f.zero() {
		return true
	}
	if d := f.Latency + randDuration(f.Jitter); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			w.count(StatusNoResponse)
			return false
		case <-fs.closed:
			t.Stop()
		}
	}
	u := rand.Float64()
	switch {
	case u < f.Hang:
		w.count(StatusNoResponse)
		select {
		case <-r.Context().Done():
		case <-fs.closed:
		}
		// Close the connection without a response, as a stuck upstream
		// that finally drops it would.
		panic(http.ErrAbortHandler)
	case u < f.Hang+f.Force429:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, "rate limit exceeded (injected fault)", catalogStyle)
		return false
	case u < f.Hang+f.Force429+f.ErrorRate:
		status := [...]int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable}[rand.IntN(3)]
		writeError(w, status, http.StatusText(status)+" (injected fault)", catalogStyle)
		return false
	}
	return true
}

func randDuration(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return rand.N(max)
}
