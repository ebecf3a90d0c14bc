package upstreamsim

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The endpoints, as counted.
const (
	EndpointRoot      = "/"
	EndpointDiscovery = "/api/v1/discovery"
	EndpointFeeds     = "/api/v1/feeds"
	EndpointReport    = "/api/v1/reports"
	EndpointLatest    = "/api/v1/reports/latest"
	EndpointBulk      = "/api/v1/reports/bulk"
	EndpointPage      = "/api/v1/reports/page"
	EndpointWS        = "/api/v1/ws"
	EndpointOther     = "other" // any unknown path
)

// Key labels of requests that carry no known key.
const (
	KeyAnonymous = ""         // no Authorization header
	KeyUnknown   = "?unknown" // an Authorization header naming no key
)

// StatusNoResponse is the status counted for a request that got no
// response: held by a hang fault, or abandoned by its client during an
// injected latency.
const StatusNoResponse = 0

// Count is the number of requests of one network, endpoint, key and status.
type Count struct {
	Network  string `json:"network"`
	Endpoint string `json:"endpoint"`
	Key      string `json:"key"`
	Status   int    `json:"status"`
	N        int64  `json:"n"`
}

// Counters is a snapshot of the request counters. A request is counted
// once, when its response status is decided and before any byte of the
// response is sent, so a client that has read a response always finds its
// request counted.
type Counters struct {
	Counts []Count `json:"counts"` // sorted by network, endpoint, key, status
	// WS is the WebSocket activity, sorted by network and key. Upgrade
	// requests are also counted in Counts, at EndpointWS: status 101 when
	// accepted.
	WS []WSCount `json:"ws"`
}

// WSCount is the WebSocket activity of one network and key (KeyAnonymous
// and KeyUnknown for requests without a known key).
type WSCount struct {
	Network string `json:"network"`
	Key     string `json:"key"`
	// Accepted are the upgrades answered 101; Refused the upgrade requests
	// answered anything else (or nothing, under a hang fault).
	Accepted int64 `json:"accepted"`
	Refused  int64 `json:"refused"`
	// Open are the connections open now; ResetCounters leaves it alone.
	Open int64 `json:"open"`
	// Frames are the report frames sent, one report each.
	Frames int64 `json:"frames"`
	// Dropped are the connections closed by DropWS.
	Dropped int64 `json:"dropped"`
}

// WSTotal sums the WebSocket activity of network over every key; network
// "" sums both networks.
func (c Counters) WSTotal(network string) WSCount {
	out := WSCount{Network: network}
	for _, x := range c.WS {
		if network == "" || x.Network == network {
			out.Accepted += x.Accepted
			out.Refused += x.Refused
			out.Open += x.Open
			out.Frames += x.Frames
			out.Dropped += x.Dropped
		}
	}
	return out
}

// Sum returns the requests of the counts that match selects.
func (c Counters) Sum(match func(Count) bool) int64 {
	var n int64
	for _, x := range c.Counts {
		if match(x) {
			n += x.N
		}
	}
	return n
}

// Total returns every request counted.
func (c Counters) Total() int64 { return c.Sum(func(Count) bool { return true }) }

// ByEndpoint returns the requests of one endpoint (an Endpoint constant) of
// network.
func (c Counters) ByEndpoint(network, endpoint string) int64 {
	return c.Sum(func(x Count) bool { return x.Network == network && x.Endpoint == endpoint })
}

// ByKey returns the requests of a key ID (or KeyAnonymous, KeyUnknown).
func (c Counters) ByKey(keyID string) int64 {
	return c.Sum(func(x Count) bool { return x.Key == keyID })
}

// ByStatus returns the requests answered with status.
func (c Counters) ByStatus(status int) int64 {
	return c.Sum(func(x Count) bool { return x.Status == status })
}

// MarshalJSON adds totals by endpoint, key and status to the counts.
func (c Counters) MarshalJSON() ([]byte, error) {
	byEndpoint, byKey, byStatus := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, x := range c.Counts {
		byEndpoint[x.Network+" "+x.Endpoint] += x.N
		byKey[x.Key] += x.N
		byStatus[strconv.Itoa(x.Status)] += x.N
	}
	counts := c.Counts
	if counts == nil {
		counts = []Count{}
	}
	ws := c.WS
	if ws == nil {
		ws = []WSCount{}
	}
	return json.Marshal(struct {
		Total      int64            `json:"total"`
		ByEndpoint map[string]int64 `json:"byEndpoint"`
		ByKey      map[string]int64 `json:"byKey"`
		ByStatus   map[string]int64 `json:"byStatus"`
		Counts     []Count          `json:"counts"`
		WS         []WSCount        `json:"ws"`
	}{c.Total(), byEndpoint, byKey, byStatus, counts, ws})
}

type countKey struct {
	network, endpoint, key string
	status                 int
}

type counterSet struct {
	mu   sync.Mutex
	m    map[countKey]int64
	ws   map[wsCountKey]*WSCount // Open unused: see open
	open map[wsCountKey]int64    // not reset
}

type wsCountKey struct{ network, key string }

// addWS adds to the WebSocket counters of network and key.
func (cs *counterSet) addWS(network, key string, accepted, refused, frames, dropped int64) {
	k := wsCountKey{network, key}
	cs.mu.Lock()
	if cs.ws == nil {
		cs.ws = map[wsCountKey]*WSCount{}
	}
	c := cs.ws[k]
	if c == nil {
		c = &WSCount{Network: network, Key: key}
		cs.ws[k] = c
	}
	c.Accepted += accepted
	c.Refused += refused
	c.Frames += frames
	c.Dropped += dropped
	cs.mu.Unlock()
}

// addOpen moves the gauge of open connections of network and key by d.
func (cs *counterSet) addOpen(network, key string, d int64) {
	k := wsCountKey{network, key}
	cs.mu.Lock()
	if cs.open == nil {
		cs.open = map[wsCountKey]int64{}
	}
	cs.open[k] += d
	if cs.open[k] == 0 {
		delete(cs.open, k)
	}
	cs.mu.Unlock()
}

func (cs *counterSet) add(k countKey) {
	cs.mu.Lock()
	if cs.m == nil {
		cs.m = map[countKey]int64{}
	}
	cs.m[k]++
	cs.mu.Unlock()
}

func (cs *counterSet) snapshot() Counters {
	cs.mu.Lock()
	out := make([]Count, 0, len(cs.m))
	for k, n := range cs.m {
		out = append(out, Count{Network: k.network, Endpoint: k.endpoint, Key: k.key, Status: k.status, N: n})
	}
	var ws []WSCount
	for k, c := range cs.ws {
		x := *c
		x.Open = cs.open[k]
		ws = append(ws, x)
	}
	for k, n := range cs.open {
		if cs.ws[k] == nil {
			ws = append(ws, WSCount{Network: k.network, Key: k.key, Open: n})
		}
	}
	cs.mu.Unlock()
	slices.SortFunc(ws, func(a, b WSCount) int {
		if c := strings.Compare(a.Network, b.Network); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	slices.SortFunc(out, func(a, b Count) int {
		if c := strings.Compare(a.Network, b.Network); c != 0 {
			return c
		}
		if c := strings.Compare(a.Endpoint, b.Endpoint); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return a.Status - b.Status
	})
	return Counters{Counts: out, WS: ws}
}

// reset zeroes every counter but the gauge of open connections.
func (cs *counterSet) reset() {
	cs.mu.Lock()
	cs.m = nil
	cs.ws = nil
	cs.mu.Unlock()
}

// Counters returns a snapshot of the request counters.
func (s *Simulator) Counters() Counters { return s.counters.snapshot() }

// ResetCounters sets every counter to zero, except the gauge of open
// WebSocket connections, and forgets the rate limit's refusals.
func (s *Simulator) ResetCounters() {
	s.counters.reset()
	for _, n := range s.networks {
		n.limMu.Lock()
		n.refusals = nil
		n.limMu.Unlock()
	}
}

// countingWriter counts its request once, at the first WriteHeader or
// Write, before anything reaches the client.
type countingWriter struct {
	http.ResponseWriter
	cs      *counterSet
	k       countKey
	counted bool
}

func (w *countingWriter) count(status int) {
	if w.counted {
		return
	}
	w.counted = true
	w.k.status = status
	w.cs.add(w.k)
}

func (w *countingWriter) WriteHeader(status int) {
	w.count(status)
	w.ResponseWriter.WriteHeader(status)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.count(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
