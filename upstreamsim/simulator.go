package upstreamsim

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"streamgate/catalog"
	"streamgate/feedid"
)

// Key is an API key of the simulated service and what it may read.
type Key struct {
	ID     string // sent in the Authorization header; a UUID upstream
	Secret string // the HMAC secret

	// Streams are the non-hidden stream IDs the key may read; nil, empty or
	// ["*"] means every non-hidden stream of both networks.
	Streams []string
	// Hidden are the hidden stream IDs the key is entitled to; "*" means
	// every hidden stream. nil means none.
	Hidden []string
}

// Config configures a Simulator. The zero value is valid: it has the
// defaults below, no keys and no rate limit.
type Config struct {
	// History is how far back reports exist. Zero means 24h.
	History time.Duration
	// Now is the clock of the report window, the skew check and the rate
	// limits. nil means time.Now, and then the rate limit counts a request
	// at the time it arrived when it is served as CountArrivals prepares.
	Now func() time.Time
	// MaxSkew is the largest difference allowed between
	// X-Authorization-Timestamp and Now. Zero means 5s.
	MaxSkew time.Duration
	// RateLimit is the sustained rate, in requests per second, allowed per
	// key, per endpoint and per network. Zero disables rate limiting
	// (Default sets 10, the published limit).
	RateLimit rate.Limit
	// RateMode is how RateLimit counts: the real service does not publish
	// it. The zero value is RateBucket.
	RateMode RateMode
	// Burst is the bucket size of RateLimit in RateBucket mode. Zero means
	// ceil(RateLimit) (Default sets 1, the strictest bucket).
	Burst int
	// MaxBulkFeeds caps the stream IDs of one bulk request (more is 400).
	// Zero means no cap.
	MaxBulkFeeds int
	// Keys are the API keys the service accepts.
	Keys []Key
	// Faults are the faults injected from the start; see SetFaults.
	Faults Faults
	// DONSeed is the seed the keys of the simulated DON are derived from
	// (see DON). "" means DONSeed, the DON every simulator has by default.
	DONSeed string

	// HAOrigins turns on high-availability mode: HEAD / advertises these
	// origins (X-Cll-Available-Origins: {001,002} for "001", "002") and an
	// upgrade of /api/v1/ws chooses one with X-Cll-Origin. Every origin
	// serves the same reports, byte for byte. nil (the default) is a
	// service without HA: HEAD / advertises nothing and X-Cll-Origin is
	// ignored.
	HAOrigins []string
	// WSMaxConnsPerKey caps the concurrent WebSocket connections of one key
	// on one network; an upgrade beyond it is 429. Zero means 20, the
	// published limit; a negative value means no cap.
	WSMaxConnsPerKey int
	// WSTick is how often a WebSocket connection looks for newly published
	// reports. Zero means once a second, just after each whole second of
	// Now; a test on a settable clock sets a few milliseconds.
	WSTick time.Duration
	// WSPingInterval is how often the simulator pings each WebSocket
	// client; a client that has not answered within min(WSPingInterval,
	// 5s) is disconnected. Zero means 15s; a negative value disables pings.
	WSPingInterval time.Duration
	// WSWriteTimeout bounds the writes of one tick (the frames of one
	// second); a connection whose frames cannot be written in time is
	// closed. Zero means 10s.
	WSWriteTimeout time.Duration
}

// The keys of Default.
const (
	// OrgKeyID and OrgKeySecret are an organisation's key: every stream of
	// both networks, hidden ones included.
	OrgKeyID     = "7d3f9a2e-4b6c-4e1d-8f5a-2c9b0e7d1a63"
	OrgKeySecret = "streams-sim-org-secret-0f4e8b2d6a1c9e73"
	// RestrictedKeyID and RestrictedKeySecret are a key that may read only
	// RestrictedStreams and no hidden stream.
	RestrictedKeyID     = "b2e8c4a1-6d3f-4a9e-b7c5-1e0f2d8a4c96"
	RestrictedKeySecret = "streams-sim-restricted-secret-5a7c9e1b3d"
)

// RestrictedStreams returns the stream IDs RestrictedKeyID may read: the
// exchange prices of BTC/USD, ETH/USD and LINK/USD, EUR/USD and Apple's
// equity price. They exist on both networks.
func RestrictedStreams() []string {
	want := []struct{ base, quote, attr string }{
		{"BTC", "USD", aCex}, {"ETH", "USD", aCex}, {"LINK", "USD", aCex},
		{"EUR", "USD", aForex}, {"AAPL", "USD", aEquity},
	}
	var out []string
	for _, w := range want {
		for _, raw := range table {
			d := raw.fill()
			if d.base == w.base && d.quote == w.quote && d.attr == w.attr {
				id := FeedIDFor(d.schema, d.name())
				out = append(out, "0x"+hex.EncodeToString(id[:]))
			}
		}
	}
	return out
}

// NetworkFor maps a gateway's network name to the simulator network that
// stands in for its upstream: Testnet for names containing "test", else
// Mainnet.
func NetworkFor(name string) string {
	if strings.Contains(name, "test") {
		return Testnet
	}
	return Mainnet
}

// Default returns the configuration of a realistic simulator on the wall
// clock: 24 h of history, 5 s skew, 10 requests per second counted the
// strictest way (a token bucket with a burst of 1: no two requests of a
// key and endpoint closer than 100 ms), and two keys: OrgKeyID
// (everything, hidden streams included) and RestrictedKeyID
// (RestrictedStreams only).
func Default() Config {
	return Config{
		History:   24 * time.Hour,
		MaxSkew:   5 * time.Second,
		RateLimit: 10,
		RateMode:  RateBucket,
		Burst:     1,
		Keys: []Key{
			{ID: OrgKeyID, Secret: OrgKeySecret, Streams: []string{"*"}, Hidden: []string{"*"}},
			{ID: RestrictedKeyID, Secret: RestrictedKeySecret, Streams: RestrictedStreams()},
		},
	}
}

// Simulator simulates both networks of the service. It is safe for
// concurrent use; Close ends requests held by a hang fault.
type Simulator struct {
	now      func() time.Time
	history  int64 // seconds
	maxSkew  time.Duration
	limit    rate.Limit
	mode     RateMode
	burst    int
	maxBulk  int
	keys     map[string]*key
	networks map[string]*network

	faults   faultState // see faults.go
	counters counterSet
	cache    reportCache

	haOrigins []string
	originsHV string // the value of OriginsHeader; "" without HA
	ws        wsState

	closeOnce sync.Once
	closed    chan struct{}

	wallClock bool // Config.Now was nil: requests count when they arrived (countAt)
}

// key is a Key with its entitlements as sets.
type key struct {
	Key
	secret    []byte
	allPublic bool
	public    map[string]bool
	allHidden bool
	hidden    map[string]bool
}

// mayRead reports whether k may read the reports of st.
func (k *key) mayRead(st *stream) bool {
	if st.hidden {
		return k.allHidden || k.hidden[st.idHex]
	}
	return k.allPublic || k.public[st.idHex]
}

type network struct {
	name    string
	index   uint64 // part of cache keys
	don     *don   // the keys that sign its reports
	streams []*stream
	byID    map[string]*stream // by lowercase "0x" ID

	limMu    sync.Mutex
	limiters map[limiterKey]counter
	accepted map[limiterKey]*acceptedRing // see RateRefusal
	refusals []RateRefusal                // the latest refusalLog
}

type limiterKey struct{ key, endpoint string }

// New returns a Simulator for cfg, or every problem of cfg joined.
func New(cfg Config) (*Simulator, error) {
	var errs []error
	if cfg.History < 0 {
		errs = append(errs, errors.New("simulator: History must not be negative"))
	}
	if cfg.DONSeed == "" {
		cfg.DONSeed = DONSeed
	}
	if cfg.History == 0 {
		cfg.History = 24 * time.Hour
	}
	if cfg.History%time.Second != 0 {
		errs = append(errs, errors.New("simulator: History must be whole seconds"))
	}
	if cfg.MaxSkew < 0 {
		errs = append(errs, errors.New("simulator: MaxSkew must not be negative"))
	}
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = 5 * time.Second
	}
	if cfg.RateLimit < 0 {
		errs = append(errs, errors.New("simulator: RateLimit must not be negative"))
	}
	if cfg.Burst < 0 {
		errs = append(errs, errors.New("simulator: Burst must not be negative"))
	}
	if cfg.RateMode < RateBucket || cfg.RateMode > RateSliding {
		errs = append(errs, fmt.Errorf("simulator: unknown %v", cfg.RateMode))
	}
	if cfg.Burst == 0 && cfg.RateLimit > 0 {
		cfg.Burst = int(math.Ceil(math.Min(float64(cfg.RateLimit), 1e6)))
	}
	if cfg.MaxBulkFeeds < 0 {
		errs = append(errs, errors.New("simulator: MaxBulkFeeds must not be negative"))
	}
	if err := cfg.Faults.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := validateOrigins(cfg.HAOrigins); err != nil {
		errs = append(errs, err)
	}
	if cfg.WSTick < 0 {
		errs = append(errs, errors.New("simulator: WSTick must not be negative"))
	}
	if cfg.WSWriteTimeout < 0 {
		errs = append(errs, errors.New("simulator: WSWriteTimeout must not be negative"))
	}
	wallClock := cfg.Now == nil
	if wallClock {
		cfg.Now = time.Now
	}

	s := &Simulator{
		now:      cfg.Now,
		history:  int64(cfg.History / time.Second),
		maxSkew:  cfg.MaxSkew,
		limit:    cfg.RateLimit,
		mode:     cfg.RateMode,
		burst:    cfg.Burst,
		maxBulk:  cfg.MaxBulkFeeds,
		keys:     make(map[string]*key, len(cfg.Keys)),
		networks: make(map[string]*network, 2),
		closed:   make(chan struct{}),
	}
	s.wallClock = wallClock
	for i, k := range cfg.Keys {
		if k.ID == "" || k.Secret == "" {
			errs = append(errs, fmt.Errorf("simulator: key %d: ID and Secret are required", i))
			continue
		}
		if _, dup := s.keys[k.ID]; dup {
			errs = append(errs, fmt.Errorf("simulator: key %d: duplicate ID %q", i, k.ID))
			continue
		}
		kk := &key{Key: k, secret: []byte(k.Secret), public: map[string]bool{}, hidden: map[string]bool{}}
		kk.allPublic = len(k.Streams) == 0
		for _, id := range k.Streams {
			if id == "*" {
				kk.allPublic = true
			} else if _, ok := streamID(id); ok {
				kk.public[strings.ToLower(id)] = true
			} else {
				errs = append(errs, fmt.Errorf("simulator: key %d: stream %q is neither \"*\" nor 0x and 64 hex digits", i, id))
			}
		}
		for _, id := range k.Hidden {
			if id == "*" {
				kk.allHidden = true
			} else if _, ok := streamID(id); ok {
				kk.hidden[strings.ToLower(id)] = true
			} else {
				errs = append(errs, fmt.Errorf("simulator: key %d: hidden stream %q is neither \"*\" nor 0x and 64 hex digits", i, id))
			}
		}
		s.keys[k.ID] = kk
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for i, name := range []string{Mainnet, Testnet} {
		n := &network{name: name, index: uint64(i), streams: buildStreams(name), don: newDON(cfg.DONSeed, name),
			byID: map[string]*stream{}, limiters: map[limiterKey]counter{}}
		for _, st := range n.streams {
			n.byID[st.idHex] = st
		}
		s.networks[name] = n
	}
	if len(cfg.HAOrigins) > 0 {
		s.haOrigins = slices.Clone(cfg.HAOrigins)
		s.originsHV = "{" + strings.Join(s.haOrigins, ",") + "}"
	}
	s.ws.init(cfg)
	f := cfg.Faults
	s.faults.cur.Store(&f)
	s.faults.closed = s.closed
	s.ws.setStall(f)
	return s, nil
}

// Close ends the requests that a hang fault holds and makes later hangs end
// at once, and closes every WebSocket connection (status 1001, going
// away). The handlers go on serving otherwise.
func (s *Simulator) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}

func (s *Simulator) network(name string) *network {
	n, ok := s.networks[name]
	if !ok {
		panic(fmt.Sprintf("simulator: unknown network %q (want %q or %q)", name, Mainnet, Testnet))
	}
	return n
}

// Streams returns every stream of network, hidden ones included, sorted by
// feed ID. It panics on a network other than Mainnet and Testnet.
func (s *Simulator) Streams(network string) []catalog.Stream {
	n := s.network(network)
	out := make([]catalog.Stream, len(n.streams))
	for i, st := range n.streams {
		out[i] = st.Stream
	}
	return out
}

// Hidden returns the IDs of the hidden streams of network, sorted.
func (s *Simulator) Hidden(network string) []string {
	var out []string
	for _, st := range s.network(network).streams {
		if st.hidden {
			out = append(out, st.idHex)
		}
	}
	return out
}

// Window returns the first and last timestamps (Unix seconds) at which
// network has a report of feedID now, or ok false when it has none (an
// unknown stream, or one decommissioned before the window). Like Streams,
// it panics on an unknown network.
func (s *Simulator) Window(network, feedID string) (first, last int64, ok bool) {
	st := s.network(network).byID[strings.ToLower(feedID)]
	if st == nil {
		return 0, 0, false
	}
	first, last = st.window(s.now().Unix(), s.history)
	return first, last, first <= last
}

// window returns the bounds of the reports of st at now, history seconds
// back (empty when first > last).
func (st *stream) window(now, history int64) (first, last int64) {
	first = max(now-history, st.created)
	last = min(now-st.delay, st.decom)
	return first, last
}

// Report is a report record (as the upstream API sends it).
type Report struct {
	FeedID                string `json:"feedID"`
	ValidFromTimestamp    int64  `json:"validFromTimestamp"`
	ObservationsTimestamp int64  `json:"observationsTimestamp"`
	FullReport            string `json:"fullReport"`
}

// Report returns the report of feedID at ts on network, as the API serves
// it, whether or not ts lies in the current window; ok is false for an
// unknown stream. Like Streams, it panics on an unknown network.
func (s *Simulator) Report(network, feedID string, ts int64) (r Report, ok bool) {
	n := s.network(network)
	st := n.byID[strings.ToLower(feedID)]
	if st == nil {
		return Report{}, false
	}
	if err := json.Unmarshal(s.appendReport(nil, n, st, ts), &r); err != nil {
		panic("simulator: report does not decode: " + err.Error()) // a bug of appendReportJSON
	}
	return r, true
}

// allow counts a request of key k on endpoint at now (when it arrived, see
// countAt; handled is when the handler ran) under s's rate limit, and
// reports whether it is within it.
func (n *network) allow(s *Simulator, k, endpoint string, now, handled time.Time) bool {
	n.limMu.Lock()
	defer n.limMu.Unlock()
	lk := limiterKey{k, endpoint}
	c := n.limiters[lk]
	if c == nil {
		c = newCounter(s.mode, s.limit, s.burst)
		n.limiters[lk] = c
	}
	if n.accepted == nil {
		n.accepted = map[limiterKey]*acceptedRing{}
	}
	ring := n.accepted[lk]
	if ring == nil {
		ring = &acceptedRing{}
		n.accepted[lk] = ring
	}
	if c.allow(now) {
		ring.add(now)
		return true
	}
	if len(n.refusals) >= refusalLog {
		n.refusals = append(n.refusals[:0], n.refusals[1:]...)
	}
	n.refusals = append(n.refusals, RateRefusal{At: now, Handled: handled, Network: n.name, Endpoint: endpoint, Key: k, Accepted: ring.list()})
	return false
}

// reportCache memoises encoded report records. It is direct-mapped: a
// fixed array of slots, each holding the last record stored under its
// hash, so memory is bounded and lookups take no lock.
type reportCache struct {
	slots [cacheSlots]atomic.Pointer[cachedReport]
}

const cacheSlots = 4096

type cachedReport struct {
	net, idx uint64
	ts       int64
	json     []byte
}

// appendReport appends the JSON record of st at ts to dst: from the
// cache, unless the Forge fault is set.
func (s *Simulator) appendReport(dst []byte, n *network, st *stream, ts int64) []byte {
	if forge := s.faults.cur.Load().Forge; forge != "" {
		return st.appendReportJSON(dst, ts, n.don, forge, n.streams[(st.idx+1)%len(n.streams)].idHex)
	}
	return s.cache.appendReport(dst, n, st, ts)
}

// appendReport appends the JSON record of st at ts to dst.
func (c *reportCache) appendReport(dst []byte, n *network, st *stream, ts int64) []byte {
	idx := uint64(st.idx)
	slot := &c.slots[mix(uint64(ts)^n.index<<56^idx<<40)%cacheSlots]
	if e := slot.Load(); e != nil && e.ts == ts && e.idx == idx && e.net == n.index {
		return append(dst, e.json...)
	}
	js := st.appendReportJSON(make([]byte, 0, 2*maxFullReport+256), ts, n.don, "", "")
	slot.Store(&cachedReport{net: n.index, idx: idx, ts: ts, json: js})
	return append(dst, js...)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func sortStreams(ss []*stream) {
	slices.SortFunc(ss, func(a, b *stream) int { return strings.Compare(a.idHex, b.idHex) })
}

// streamID reads a stream ID as the upstream does: feedid's grammar, but
// only with a lower-case "0x" (the upstream refuses "0X").
func streamID(v string) ([32]byte, bool) {
	if !strings.HasPrefix(v, "0x") {
		return [32]byte{}, false
	}
	return feedid.Bytes(v)
}
