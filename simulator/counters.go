package simulator

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
	return json.Marshal(struct {
		Total      int64            `json:"total"`
		ByEndpoint map[string]int64 `json:"byEndpoint"`
		ByKey      map[string]int64 `json:"byKey"`
		ByStatus   map[string]int64 `json:"byStatus"`
		Counts     []Count          `json:"counts"`
	}{c.Total(), byEndpoint, byKey, byStatus, counts})
}

type countKey struct {
	network, endpoint, key string
	status                 int
}

type counterSet struct {
	mu sync.Mutex
	m  map[countKey]int64
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
	cs.mu.Unlock()
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
	return Counters{Counts: out}
}

func (cs *counterSet) reset() {
	cs.mu.Lock()
	cs.m = nil
	cs.mu.Unlock()
}

// Counters returns a snapshot of the request counters.
func (s *Simulator) Counters() Counters { return s.counters.snapshot() }

// ResetCounters sets every counter to zero.
func (s *Simulator) ResetCounters() { s.counters.reset() }

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
