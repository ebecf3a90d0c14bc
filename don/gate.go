package don

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/ethereum/go-ethereum/common/lru"
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
	EntryArchive  = "archive"  // a report read back from the archive
)

// Metrics are the counters of every Gate of a process.
type Metrics struct {
	verified   *prometheus.CounterVec
	failed     *prometheus.CounterVec
	remembered *prometheus.CounterVec
}

// NewMetrics registers the verification counters with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		verified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_reports_verified_total",
			Help: "Reports whose DON signatures were verified where they entered (upstream answer, stream frame, shared-tier entry, report read from the archive).",
		}, []string{"network", "entry"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_report_verification_failures_total",
			Help: "Reports that did not verify, by cause; mode enforce refused them, mode report served them, except causes oversize and duplicate_key, refused in every mode (off included) as they are read. Cause unknown_digest means the DON configuration needs an update.",
		}, []string{"network", "entry", "cause", "mode"}),
		remembered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "streamgate_report_verifications_remembered_total",
			Help: "Reports checked where they entered whose verification was the one remembered for the same bytes under the rules in force (no signature recovered again); each is also counted, as verified or failed, by streamgate_reports_verified_total or streamgate_report_verification_failures_total.",
		}, []string{"network", "entry"}),
	}
	if reg != nil {
		reg.MustRegister(m.verified, m.failed, m.remembered)
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
	mode  string
	v     *Verifier
	memo  *memo
	epoch uint64 // how many times Set was called: what a decoded view was made under
}

// memo keeps the result of each report verified where it entered, so that
// the same bytes entering again (a report read back from the archive, the
// stream's frame of a report a REST answer brought) and the decoded view
// have it without recovering a signature again. It is keyed by every
// byte the verification reads (memoKey), so bytes that differ in any way
// (a row rewritten in a shared database) are verified anew; it is bounded and
// evicts the least recently used result one at a time (go-ethereum's
// common/lru, already linked for the crypto), so a burst of new reports
// costs the oldest results, never the whole memo; a report whose result
// was evicted is verified again by Verification, if asked for. A reload
// starts a new one.
type memo struct {
	c *lru.Cache[[32]byte, Result]
}

// memoMax bounds the results a memo keeps (about 150 bytes each with the
// LRU's list element: about 10 MB).
const memoMax = 1 << 16

func newMemo() *memo { return &memo{c: lru.NewCache[[32]byte, Result](memoMax)} }

// memoKey is the key of a record's result: the SHA-256 of every field it
// is checked by, each of fixed length or preceded by its length, so that
// no two records share their hashed bytes.
func memoKey(r Record) [32]byte {
	h := sha256.New()
	var n [8 * 4]byte
	binary.BigEndian.PutUint64(n[:8], uint64(len(r.FeedID)))
	binary.BigEndian.PutUint64(n[8:16], uint64(len(r.FullReport)))
	binary.BigEndian.PutUint64(n[16:24], uint64(r.ValidFromTimestamp))
	binary.BigEndian.PutUint64(n[24:], uint64(r.ObservationsTimestamp))
	h.Write(n[:])
	h.Write([]byte(r.FeedID))
	h.Write([]byte(r.FullReport))
	var k [32]byte
	h.Sum(k[:0])
	return k
}

func (m *memo) put(k [32]byte, r Result) { m.c.Add(k, r) }

func (m *memo) get(k [32]byte) (Result, bool) { return m.c.Get(k) }

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

// Set puts mode and v in force. v may be nil only with mode off. It
// reports whether the new rules are stricter: mode enforce where it was
// not, or a trusted configuration removed or changed. What was admitted
// under the old rules may then not pass: the caller checks it again or
// drops it.
func (g *Gate) Set(mode string, v *Verifier) (stricter bool) {
	if v == nil {
		mode = ModeOff
	}
	next := &gateState{mode: mode, v: v, memo: newMemo()}
	if cur := g.state.Load(); cur != nil {
		next.epoch = cur.epoch + 1
	}
	old := g.state.Swap(next)
	return mode == ModeEnforce && (old == nil || old.mode != ModeEnforce || !v.covers(old.v))
}

// AdmitsFrame reports whether the report of a stream frame passes the
// rules in force, as CheckFrame would decide, without counting or
// logging it: for what was admitted before a reload.
func (g *Gate) AdmitsFrame(frame []byte) bool {
	rec, _, err := ReadReport(frame)
	if g == nil || Refused(err) {
		return !Refused(err)
	}
	st := g.state.Load()
	if st.mode != ModeEnforce {
		return true
	}
	return st.v.VerifyRecord(rec).OK()
}

// Epoch identifies the rules in force: it changes with every Set, so that
// what was derived from a verification (a decoded view kept in the cache)
// is keyed by the rules it was made under.
func (g *Gate) Epoch() uint64 {
	if g == nil {
		return 0
	}
	return g.state.Load().epoch
}

// Mode returns the mode in force.
func (g *Gate) Mode() string {
	if g == nil {
		return ModeOff
	}
	return g.state.Load().mode
}

// Check verifies a report record which entered at entry (its signatures,
// and that its feedID and times are its signed blob's), and reports
// whether it may be cached and served: true when it verified, in mode
// report, and in mode off (then unchecked, with an empty Result). The
// result of the same bytes checked before under the rules in force (the
// memo: a reload starts a new one) is used without recovering the
// signatures again, counted as remembered; it is counted and logged as
// verified or failed all the same.
func (g *Gate) Check(entry string, rec Record) (Result, bool) {
	if g == nil {
		return Result{}, true
	}
	st := g.state.Load()
	if st.mode == ModeOff {
		return Result{}, true
	}
	k := memoKey(rec)
	res, remembered := st.memo.get(k)
	if remembered {
		g.m.remembered.WithLabelValues(g.network, entry).Inc()
	} else {
		res = st.v.VerifyRecord(rec)
		st.memo.put(k, res)
	}
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
			zap.String("meaning", res.Cause.Meaning()), zap.String("feed", rec.FeedID),
			zap.String("config_digest", hexDigest(res.Digest)), zap.String("action", action))
	}
	return res, st.mode == ModeReport
}

// Verification returns what the decoded view states of a report: the
// result recorded when it entered, or (when that record was dropped) its
// verification now, neither counted nor logged.
func (g *Gate) Verification(rec Record) Verification {
	if g == nil {
		return Verification{Mode: ModeOff}
	}
	st := g.state.Load()
	if st.mode == ModeOff {
		return Verification{Mode: ModeOff}
	}
	k := memoKey(rec)
	res, ok := st.memo.get(k)
	if !ok {
		res = st.v.VerifyRecord(rec)
		st.memo.put(k, res)
	}
	return Verification{Mode: st.mode, Result: res}
}

// Verify returns the verification of a report under the configuration in
// force, without counting, logging or recording it; ok is false in mode
// off.
func (g *Gate) Verify(rec Record) (res Result, ok bool) {
	if g == nil {
		return Result{}, false
	}
	st := g.state.Load()
	if st.mode == ModeOff {
		return Result{}, false
	}
	return st.v.VerifyRecord(rec), true
}

// CheckFrame checks the report of a stream frame,
// {"report":{"feedID":"0x…","validFromTimestamp":N,
// "observationsTimestamp":N,"fullReport":"0x…"}}, read as every report is
// (ReadReport): a frame over the size bound or repeating a key is refused
// in every mode (Refuse); then its signatures and that the times the hub
// reads are the signed report's (Check).
func (g *Gate) CheckFrame(frame []byte) bool {
	rec, _, err := ReadReport(frame)
	if Refused(err) {
		g.Refuse(EntryStream, err)
		return false
	}
	if g == nil || g.state.Load().mode == ModeOff {
		return true
	}
	_, ok := g.Check(EntryStream, rec) // a frame that did not read fails as malformed
	return ok
}

// FrameRecord reads the Record of a stream frame as CheckFrame does; a
// field it does not read is left zero (and then fails the check).
func FrameRecord(frame []byte) Record {
	rec, _, _ := ReadReport(frame)
	return rec
}

// Refuse counts and logs (once per cause and entry) a report refused as it
// was read (ReadRecord, ReadReport, ReadReports: Refused(err)), and
// returns its cause. Such a report is refused in every mode, off
// included: the gateway cannot tell which report it is, or it is larger
// than any report can be; it is never cached or served. A nil Gate counts
// nothing.
func (g *Gate) Refuse(entry string, err error) Cause {
	c := CauseOf(err)
	if g == nil {
		return c
	}
	mode := g.state.Load().mode
	g.m.failed.WithLabelValues(g.network, entry, string(c), mode).Inc()
	if _, seen := g.logged.LoadOrStore(entry+"/"+string(c), struct{}{}); !seen {
		g.log.Warn("a report was refused as it was read (logged once per cause and entry; streamgate_report_verification_failures_total counts each)",
			zap.String("network", g.network), zap.String("entry", entry), zap.String("cause", string(c)),
			zap.String("meaning", c.Meaning()), zap.String("error", err.Error()),
			zap.String("action", "refused in every mode: never cached or served"))
	}
	return c
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
