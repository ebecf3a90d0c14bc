package auth

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultReplayMaxEntries is the number of signatures a ReplayRecord holds
// unless told otherwise. The record keeps the signatures admitted in the
// last 2×ttl at most (ttl = 2×MaxSkew), so at the default skew of 5 s a
// million entries is 50,000 admitted requests a second, sustained, for one
// replica: well above what one gateway serves. At ReplayEntryBytes each it
// is some 52 MB.
const DefaultReplayMaxEntries = 1_000_000

// ReplayEntryBytes is the heap an entry of a ReplayRecord takes, on
// average: a 16-byte key and an 8-byte time in a Go map, whose tables hold
// an entry in 36 to 67 bytes as they fill and split (measured with Go
// 1.26). ReplayStats.Bytes is Entries × ReplayEntryBytes.
const ReplayEntryBytes = 52

// ErrReplayFull is the error of a request refused because the replay
// record holds as many signatures as it may. Such a request is neither a
// client error nor an authentication failure: the gateway is overloaded,
// and the client may retry (the error is a *ReplayFullError, which says
// when).
var ErrReplayFull = errors.New("auth: replay record full")

// ReplayFullError is the error of a request refused because the replay
// record is full. It wraps ErrReplayFull; find it with errors.As.
type ReplayFullError struct {
	// RetryAfter is how long until the record drops a generation, which
	// makes room.
	RetryAfter time.Duration
	// Team is set when the record has room, but not the team's share of
	// it (see ReplayShares).
	Team bool
}

func (e *ReplayFullError) Error() string {
	if e.Team {
		return fmt.Sprintf("%v: the team's share is used up: room in %v", ErrReplayFull, e.RetryAfter)
	}
	return fmt.Sprintf("%v: room in %v", ErrReplayFull, e.RetryAfter)
}

// ReplayShares divides a record of maxEntries among teams so that no
// team's signatures can take another's room: need gives, per team, the
// most entries it can use (its rate over the record's life, plus its
// burst; ReplayNeed), or 0 for a team without a rate, whose need is
// unbounded. The division is max-min fair: teams needing less than an
// equal share get what they need, and the rest is split equally among
// the others, so the shares add up to at most maxEntries, and a team
// without a rate gets an equal part of what the teams with one leave.
func ReplayShares(maxEntries int, need map[string]int) map[string]int {
	if maxEntries <= 0 {
		maxEntries = DefaultReplayMaxEntries
	}
	names := make([]string, 0, len(need))
	for t := range need {
		names = append(names, t)
	}
	unbounded := func(n int) int {
		if n <= 0 {
			return math.MaxInt
		}
		return n
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(unbounded(need[a]), unbounded(need[b])); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	shares := make(map[string]int, len(names))
	left := maxEntries
	for i, t := range names {
		s := min(unbounded(need[t]), left/(len(names)-i))
		shares[t] = s
		left -= s
	}
	return shares
}

// ReplayNeed is the most entries a team limited to rps requests a second
// with burst can hold in a record of requests whose timestamps may be
// maxSkew off: what it admits in the record's life (4×maxSkew at most),
// plus its burst. 0 (unbounded) when rps is 0.
func ReplayNeed(rps float64, burst int, maxSkew time.Duration) int {
	if rps <= 0 {
		return 0
	}
	return int(math.Ceil(rps*(4*maxSkew).Seconds())) + burst + 1
}

func (e *ReplayFullError) Unwrap() error { return ErrReplayFull }

// ReplayStats describes a ReplayRecord, for metrics.
type ReplayStats struct {
	// Entries is the number of signatures held.
	Entries int
	// Bytes is the approximate heap they take: Entries × ReplayEntryBytes.
	Bytes int64
	// MaxEntries is the bound on Entries.
	MaxEntries int
	// FullRefusals counts the requests refused because the record was
	// full (ErrReplayFull), since it was made.
	FullRefusals uint64
}

// A ReplayRecord remembers the signatures of the requests a Verifier
// admitted, each with the time of its first use, for at least ttl
// (2×MaxSkew: the longest a signature's timestamp stays within the skew).
// It keeps two generations and drops the older every ttl, so it holds the
// signatures recorded in the last ttl to 2×ttl. A generation's map is
// emptied and used again for the next generation while it is no larger
// than twice the generation just ended, so that a steady load makes no
// garbage; a map grown by a burst is dropped, since a map emptied in place
// keeps its size and would hold the burst's memory for good.
//
// Memory is bounded twice. Only admitted requests are recorded (see
// Verifier.Check and Verifier.Record), so the record holds at most the
// admitted rate × 2×ttl entries, whatever a client sends; and the number
// of entries is capped (MaxEntries), each a fixed ReplayEntryBytes or so.
// When the record is full, a signature not in it is refused with
// ErrReplayFull rather than accepted unrecorded: accepting it would let it
// be replayed, each replay a paid upstream call. The cap is reached only
// if more than MaxEntries / (4×MaxSkew) requests a second are admitted for
// up to 2×ttl: at the defaults, 50,000 a second.
//
// A ReplayRecord is safe for concurrent use, and may be shared by
// successive Verifiers (see VerifierConfig.Record), so that a
// configuration reload forgets no signature.
type ReplayRecord struct {
	epoch time.Time // times are kept as nanoseconds since epoch

	mu      sync.Mutex
	started bool
	rotated int64  // when the current generation began
	gen     uint64 // counts the rotations, which change the maps
	ttl     int64  // how long a generation lasts
	nextTTL int64  // a shorter ttl that applies from nextAt, or 0
	nextAt  int64
	max     int
	cur     map[replayKey]int64 // first uses, since rotated
	prev    map[replayKey]int64 // first uses of the generation before
	full    uint64
	// The entries of each team in cur and prev, and the most each team
	// may hold (see ReplayShares); a team not in shares is bounded by max
	// alone.
	curTeams, prevTeams map[string]int
	shares              map[string]int
}

// replayKey identifies a signature of a key: a 128-bit hash of both. The
// hash is seeded at random when the process starts and is not
// cryptographic; it need not be. A collision would only make a request
// look like a replay of another, and finding one takes the seeds, which
// never leave the process, or some 2^64 signatures.
type replayKey [16]byte

var replaySeeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}

// replayKeyOf returns the replayKey of (keyID, sig).
func replayKeyOf(keyID string, sig []byte) replayKey {
	var buf [binary.MaxVarintLen64 + 128 + 32]byte // room for every key and signature that parse
	b := binary.AppendUvarint(buf[:0], uint64(len(keyID)))
	b = append(b, keyID...)
	b = append(b, sig...)
	var k replayKey
	binary.LittleEndian.PutUint64(k[:8], maphash.Bytes(replaySeeds[0], b))
	binary.LittleEndian.PutUint64(k[8:], maphash.Bytes(replaySeeds[1], b))
	return k
}

// NewReplayRecord returns an empty record. The Verifiers that use it set
// its ttl and bound.
func NewReplayRecord() *ReplayRecord {
	return &ReplayRecord{
		epoch: time.Now(),
		ttl:   int64(10 * time.Second),
		max:   DefaultReplayMaxEntries,
		cur:   map[replayKey]int64{},
		prev:  map[replayKey]int64{},

		curTeams: map[string]int{}, prevTeams: map[string]int{},
	}
}

// since returns t as nanoseconds since r's epoch. With clocks that carry
// a monotonic reading (time.Now), steps of the wall clock change nothing.
func (r *ReplayRecord) since(t time.Time) int64 { return int64(t.Sub(r.epoch)) }

// configure sets the ttl and bound at time at. A longer ttl applies at
// once. A shorter one applies only once the ttl in force has passed, since
// the signatures recorded until now may have been accepted with the larger
// skew of that ttl, and be within the new skew for as long. (Should it
// shorten again meanwhile, the ttl of the verifier it replaces must pass
// too.)
func (r *ReplayRecord) configure(ttl time.Duration, maxEntries int, shares map[string]int, at time.Time) {
	if maxEntries <= 0 {
		maxEntries = DefaultReplayMaxEntries
	}
	now := r.since(at)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.max = maxEntries
	r.shares = shares
	if r.nextTTL != 0 && now >= r.nextAt {
		r.ttl, r.nextTTL = r.nextTTL, 0
	}
	switch t := int64(ttl); {
	case t >= r.ttl || !r.started:
		r.ttl, r.nextTTL = t, 0
	case r.nextTTL != 0:
		r.nextTTL, r.nextAt = t, max(r.nextAt, now+r.nextTTL)
	default:
		r.nextTTL, r.nextAt = t, now+r.ttl
	}
}

// rotate drops the generations older than the ttl at now. r.mu is held.
func (r *ReplayRecord) rotate(now int64) {
	if !r.started {
		r.started, r.rotated = true, now
		return
	}
	if r.nextTTL != 0 && now >= r.nextAt {
		r.ttl, r.nextTTL = r.nextTTL, 0
	}
	switch since := now - r.rotated; {
	case since >= 2*r.ttl:
		// Both generations are older than ttl.
		r.prev, r.cur = map[replayKey]int64{}, map[replayKey]int64{}
		clear(r.prevTeams)
		clear(r.curTeams)
	case since >= r.ttl, since < -r.ttl:
		// The older generation is; or the clock stepped back, and the
		// current generation starts again (a few requests out of order
		// are not a step).
		r.prev, r.cur = r.cur, r.reuse(r.prev, len(r.cur))
		r.prevTeams, r.curTeams = r.curTeams, r.prevTeams // one entry per team: kept
		clear(r.curTeams)
	default:
		return
	}
	r.rotated = now
	r.gen++
}

// reuse returns the map of a generation being dropped, emptied, for the
// next generation, when it is no larger than twice the one just ended
// (load): a map emptied in place keeps its tables, so under a steady load
// the record stops allocating once both generations have grown to it. A
// map grown by a burst is let go instead, and a new one made for load, so
// that the burst's memory goes back. r.mu is held.
func (r *ReplayRecord) reuse(old map[replayKey]int64, load int) map[replayKey]int64 {
	if len(old) <= 2*load+1024 {
		clear(old)
		return old
	}
	return make(map[replayKey]int64, load)
}

// firstUse returns the time of the first use of k, if recorded. r.mu is
// held.
func (r *ReplayRecord) firstUse(k replayKey, curOnly bool) (int64, bool) {
	if t, ok := r.cur[k]; ok || curOnly {
		return t, ok
	}
	t, ok := r.prev[k]
	return t, ok
}

// decide reports whether k may be used at now: nil, with seen when it was
// used before within grace; ErrReplay when it was used before that; a
// *ReplayFullError when it was not, and there is no room to record it.
// r.mu is held.
func (r *ReplayRecord) decide(k replayKey, team string, now int64, grace time.Duration, curOnly bool) (seen bool, err error) {
	if first, ok := r.firstUse(k, curOnly); ok {
		// A request checked before the first use but recorded after it
		// (requests run concurrently) is at 0.
		if max(now-first, 0) < int64(grace) {
			return true, nil
		}
		return true, ErrReplay
	}
	if len(r.cur)+len(r.prev) >= r.max {
		r.full++
		return false, &ReplayFullError{RetryAfter: r.retryAfter(now)}
	}
	if share, ok := r.shares[team]; ok && r.curTeams[team]+r.prevTeams[team] >= share {
		r.full++
		return false, &ReplayFullError{RetryAfter: r.retryAfter(now), Team: true}
	}
	return false, nil
}

// retryAfter returns how long from now until the record drops an entry.
// r.mu is held.
func (r *ReplayRecord) retryAfter(now int64) time.Duration {
	until := r.rotated + r.ttl
	if len(r.prev) == 0 {
		until += r.ttl // the current generation leaves at the rotation after next
	}
	return time.Duration(max(until-now, 0))
}

// peek reports, without recording anything, whether k may be used at at
// with grace (see decide). When k is in neither generation, unseen is
// set and gen is the record's rotation count: use, given both, then need
// not look in the older generation again if no rotation came between.
func (r *ReplayRecord) peek(k replayKey, team string, at time.Time, grace time.Duration) (gen uint64, unseen bool, err error) {
	now := r.since(at)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	seen, err := r.decide(k, team, now, grace, false)
	return r.gen, !seen, err
}

// use records k as used at at, unless it was used before, and reports
// whether it may be used (see decide). peeked says that peek found k in
// neither generation at rotation count gen: the older generation, not
// changed since unless a rotation came between, is then not searched
// again (a concurrent first use of k went into the current one).
func (r *ReplayRecord) use(k replayKey, team string, at time.Time, grace time.Duration, gen uint64, peeked bool) error {
	now := r.since(at)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
	seen, err := r.decide(k, team, now, grace, peeked && gen == r.gen)
	if err == nil && !seen {
		r.cur[k] = now
		r.curTeams[team]++
	}
	return err
}

// expire drops the generations expired at at.
func (r *ReplayRecord) expire(at time.Time) {
	now := r.since(at)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rotate(now)
}

// Stats returns the size of r and its refusals.
func (r *ReplayRecord) Stats() ReplayStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.cur) + len(r.prev)
	return ReplayStats{Entries: n, Bytes: int64(n) * ReplayEntryBytes, MaxEntries: r.max, FullRefusals: r.full}
}
