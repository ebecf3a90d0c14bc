package don

import (
	"bytes"
	"crypto/sha256"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// The modes of a Gate (the configuration's networks.<n>.verify.mode).
const (
	ModeEnforce = "enforce"
	ModeReport  = "report"
	ModeOff     = "off"
)

// Where a report enters the gateway, a label of the counters.
const (
	EntryUpstream = "upstream" // an upstream REST answer
	EntryStream   = "stream"   // a WebSocket frame (the upstream's, or another replica's through Redis)
	EntryShared   = "shared"   // an entry of the shared cache tier
)

// Metrics are the counters of every Gate of a process.
type Metrics struct {
	verified *prometheus.CounterVec
	failed   *prometheus.CounterVec
}

// NewMetrics registers the verification counters with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		verified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_reports_verified_total",
			Help: "Reports whose DON signatures were verified where they entered (upstream answer, stream frame, shared-tier entry).",
		}, []string{"network", "entry"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_report_verification_failures_total",
			Help: "Reports that did not verify, by cause; mode enforce refused them, mode report served them. Cause unknown_digest means the DON configuration needs an update.",
		}, []string{"network", "entry", "cause", "mode"}),
	}
	if reg != nil {
		reg.MustRegister(m.verified, m.failed)
	}
	return m
}

// Gate is the verification of one network's reports where they enter: the
// DON configurations and mode in force (replaced on reload), the counters,
// and a log line per cause and entry (the first of each; the counters
// count every one). A nil Gate admits every report unchecked.
type Gate struct {
	network string
	state   atomic.Pointer[gateState]
	m       *Metrics
	log     *zap.Logger
	logged  sync.Map // "entry/cause" → struct{}
}

type gateState struct {
	mode string
	v    *Verifier
	memo *memo
}

// memo keeps the result of each report verified where it entered, so that
// the decoded view states it without verifying again; bounded, it is
// emptied when full (a report then verified again by Verification, if
// asked for). A reload starts a new one.
type memo struct {
	mu sync.Mutex
	m  map[[32]byte]Result
}

// memoMax bounds the results a memo keeps (about 100 bytes each).
const memoMax = 1 << 16

func memoKey(feedID, fullReport string) [32]byte {
	h := sha256.New()
	h.Write([]byte(feedID))
	h.Write([]byte{0})
	h.Write([]byte(fullReport))
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (m *memo) put(k [32]byte, r Result) {
	m.mu.Lock()
	if len(m.m) >= memoMax {
		clear(m.m)
	}
	m.m[k] = r
	m.mu.Unlock()
}

func (m *memo) get(k [32]byte) (Result, bool) {
	m.mu.Lock()
	r, ok := m.m[k]
	m.mu.Unlock()
	return r, ok
}

// NewGate returns the Gate of network; Set gives it its mode. m and log
// may be nil.
func NewGate(network string, m *Metrics, log *zap.Logger) *Gate {
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	g := &Gate{network: network, m: m, log: log}
	g.Set(ModeOff, nil)
	return g
}

// Set puts mode and v in force. v may be nil only with mode off.
func (g *Gate) Set(mode string, v *Verifier) {
	if v == nil {
		mode = ModeOff
	}
	g.state.Store(&gateState{mode: mode, v: v, memo: &memo{m: map[[32]byte]Result{}}})
}

// Mode returns the mode in force.
func (g *Gate) Mode() string {
	if g == nil {
		return ModeOff
	}
	return g.state.Load().mode
}

// Check verifies the report of feedID whose fullReport is given (0x and
// hex), which entered at entry, and reports whether it may be cached and
// served: true when it verified, in mode report, and in mode off (then
// unchecked, with an empty Result).
func (g *Gate) Check(entry, feedID, fullReport string) (Result, bool) {
	if g == nil {
		return Result{}, true
	}
	st := g.state.Load()
	if st.mode == ModeOff {
		return Result{}, true
	}
	res := st.v.VerifyHex(fullReport, feedID)
	st.memo.put(memoKey(feedID, fullReport), res)
	if res.OK() {
		g.m.verified.WithLabelValues(g.network, entry).Inc()
		return res, true
	}
	g.m.failed.WithLabelValues(g.network, entry, string(res.Cause), st.mode).Inc()
	if _, seen := g.logged.LoadOrStore(entry+"/"+string(res.Cause), struct{}{}); !seen {
		action := "refused: never cached or served"
		if st.mode == ModeReport {
			action = "served (mode report)"
		}
		g.log.Warn("a report did not verify against the DON configuration (logged once per cause and entry; streamgate_report_verification_failures_total counts each)",
			zap.String("network", g.network), zap.String("entry", entry), zap.String("cause", string(res.Cause)),
			zap.String("meaning", res.Cause.Meaning()), zap.String("feed", feedID),
			zap.String("config_digest", hexDigest(res.Digest)), zap.String("action", action))
	}
	return res, st.mode == ModeReport
}

// Verification returns what the decoded view states of a report: the
// result recorded when it entered, or (when that record was dropped) its
// verification now, neither counted nor logged.
func (g *Gate) Verification(feedID, fullReport string) Verification {
	if g == nil {
		return Verification{Mode: ModeOff}
	}
	st := g.state.Load()
	if st.mode == ModeOff {
		return Verification{Mode: ModeOff}
	}
	k := memoKey(feedID, fullReport)
	res, ok := st.memo.get(k)
	if !ok {
		res = st.v.VerifyHex(fullReport, feedID)
		st.memo.put(k, res)
	}
	return Verification{Mode: st.mode, Result: res}
}

// Verify returns the verification of a report under the configuration in
// force, without counting, logging or recording it; ok is false in mode
// off.
func (g *Gate) Verify(feedID, fullReport string) (res Result, ok bool) {
	if g == nil {
		return Result{}, false
	}
	st := g.state.Load()
	if st.mode == ModeOff {
		return Result{}, false
	}
	return st.v.VerifyHex(fullReport, feedID), true
}

var (
	keyFeedID     = []byte(`"feedID":"`)
	keyFullReport = []byte(`"fullReport":"`)
)

// CheckFrame checks the report of a stream frame,
// {"report":{"feedID":"0x…",…,"fullReport":"0x…"}}, found without decoding
// the JSON (the upstream writes no spaces around the colons).
func (g *Gate) CheckFrame(frame []byte) bool {
	if g == nil || g.state.Load().mode == ModeOff {
		return true
	}
	feed, _ := jsonString(frame, keyFeedID)
	full, _ := jsonString(frame, keyFullReport)
	_, ok := g.Check(EntryStream, string(feed), string(full))
	return ok
}

// jsonString returns the string value after key in b, up to the next quote.
func jsonString(b, key []byte) ([]byte, bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return nil, false
	}
	b = b[i+len(key):]
	j := bytes.IndexByte(b, '"')
	if j < 0 {
		return nil, false
	}
	return b[:j], true
}

func hexDigest(d [32]byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2+64)
	out[0], out[1] = '0', 'x'
	for i, c := range d {
		out[2+2*i], out[3+2*i] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// DigestHex returns a config digest as 0x and 64 hex digits.
func DigestHex(d [32]byte) string { return hexDigest(d) }
