package upstreamsim

import (
	"sort"
	"time"
)

// RateRefusal is one request the rate limit refused (429), with the times
// of the last requests of its key and endpoint that it accepted before (as
// counted: when they arrived, see CountArrivals): the call times the
// simulator saw, to tell a client that sent too fast from
// one whose calls reached the simulator closer than it sent them.
type RateRefusal struct {
	// At is the time the refused request counted at: when it arrived
	// (see CountArrivals), or when it was handled.
	At time.Time `json:"at"`
	// Handled is the time the handler ran: after At by as long as the
	// simulator took to get round to the request.
	Handled  time.Time   `json:"handled"`
	Network  string      `json:"network"`
	Endpoint string      `json:"endpoint"`
	Key      string      `json:"key"`
	Accepted []time.Time `json:"accepted"` // oldest first; at most refusalHistory
}

const (
	// refusalHistory is how many accepted times of a key and endpoint a
	// refusal carries.
	refusalHistory = 4
	// refusalLog is how many refusals the simulator keeps (the latest).
	refusalLog = 256
)

// acceptedRing keeps the times of the last refusalHistory accepted
// requests of one key and endpoint.
type acceptedRing struct {
	times [refusalHistory]time.Time
	next  int
}

func (r *acceptedRing) add(t time.Time) {
	r.times[r.next] = t
	r.next = (r.next + 1) % refusalHistory
}

// list returns the times held, oldest first.
func (r *acceptedRing) list() []time.Time {
	out := make([]time.Time, 0, refusalHistory)
	for i := range refusalHistory {
		if t := r.times[(r.next+i)%refusalHistory]; !t.IsZero() {
			out = append(out, t)
		}
	}
	return out
}

// RateRefusals returns the latest requests the rate limit refused (at
// most 256), oldest first, with the accepted call times before each.
// ResetCounters clears them.
func (s *Simulator) RateRefusals() []RateRefusal {
	var out []RateRefusal
	for _, n := range s.networks {
		n.limMu.Lock()
		out = append(out, n.refusals...)
		n.limMu.Unlock()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// StreamState is a stream as GET /streams lists it: whether it is hidden
// and the window of its reports now.
type StreamState struct {
	FeedID string `json:"feedID"`
	Hidden bool   `json:"hidden"`
	// First and Last are the first and last timestamps (Unix seconds) of
	// its reports now; Last < First when it has none.
	First int64 `json:"first"`
	Last  int64 `json:"last"`
}

// StreamStates returns every stream of network with its window now. It
// panics on a network other than Mainnet and Testnet.
func (s *Simulator) StreamStates(network string) []StreamState {
	n := s.network(network)
	now := s.now().Unix()
	out := make([]StreamState, len(n.streams))
	for i, st := range n.streams {
		first, last := st.window(now, s.history)
		out[i] = StreamState{FeedID: st.idHex, Hidden: st.hidden, First: first, Last: last}
	}
	return out
}
