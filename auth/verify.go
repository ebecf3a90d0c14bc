package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"time"
)

// Authentication outcomes. ErrMissingHeaders and ErrMalformedHeaders (see
// scheme.go) are client errors (400); these are authentication failures (401).
var (
	ErrUnknownKey   = errors.New("auth: unknown key")
	ErrBadSignature = errors.New("auth: signature does not match")
	ErrSkew         = errors.New("auth: timestamp outside the allowed skew")
	ErrReplay       = errors.New("auth: signature already used")
)

// Reason is a short, bounded label for an authentication outcome, fit for a
// metric label or a log field.
func Reason(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrMissingHeaders):
		return "missing_headers"
	case errors.Is(err, ErrMalformedHeaders):
		return "malformed_headers"
	case errors.Is(err, ErrUnknownKey):
		return "unknown_key"
	case errors.Is(err, ErrBadSignature):
		return "bad_signature"
	case errors.Is(err, ErrSkew):
		return "skew"
	case errors.Is(err, ErrReplay):
		return "replay"
	case errors.Is(err, ErrReplayFull):
		return "replay_full"
	case errors.Is(err, ErrClientCert):
		return "client_cert"
	default:
		return "other"
	}
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// MaxSkew is the largest difference allowed between a request's
	// timestamp and the server's clock. Zero means 5 s.
	MaxSkew time.Duration
	// ReplayProtection accepts each (key, signature) once within the skew
	// window, but for ReplayGrace after its first use.
	ReplayProtection bool
	// ReplayGrace is how long after its first use a signature is accepted
	// again: identical requests sent at once carry identical signatures.
	// Zero refuses every repeat.
	ReplayGrace time.Duration
	// ReplayMaxEntries bounds the signatures recorded (see ReplayRecord).
	// Zero means DefaultReplayMaxEntries.
	ReplayMaxEntries int
	// Record, if non-nil, is the record of signatures to use: that of the
	// verifier this one replaces (Verifier.ReplayRecord), so that a change
	// of settings forgets no signature. The verifier sets its ttl
	// (2×MaxSkew) and bound when replay protection is on. Nil means a new
	// record. See also Verifier.WithSettings.
	Record *ReplayRecord
	// Shared, if non-nil, also records first uses where other replicas see
	// them, so that a request accepted by one replica is a replay at
	// another. Each verifier keeps its own record too, which alone decides
	// while Shared fails.
	Shared ReplayStore
	// ReplayShares bounds, per team name, the entries its signatures may
	// take in the record (see ReplayShares), in the shared store too; a
	// team not listed is bounded by ReplayMaxEntries alone.
	ReplayShares map[string]int
	// SharedFailed, if non-nil, is called with each error of Shared.
	SharedFailed func(error)
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
}

// Verifier authenticates requests against a KeyStore. It is safe for
// concurrent use.
type Verifier struct {
	maxSkew      time.Duration
	now          func() time.Time
	record       *ReplayRecord // never nil, kept while replay protection is off
	replay       *ReplayRecord // record, or nil when replay protection is off
	shared       ReplayStore   // nil unless shared and replay protection is on
	grace        time.Duration
	sharedFailed func(error)
	shares       map[string]int // entries per team, in the shared store too
}

// ReplayStore records the first uses of signatures where several verifiers
// (replicas) see them. Implementations are safe for concurrent use.
type ReplayStore interface {
	// FirstUse reports whether the signature u.Sig of u.Key may be used at
	// u.Now: it was not seen before, or was first seen less than u.Grace
	// ago. A first use is kept for at least u.TTL. A signature not seen
	// while the team's first uses kept reach u.TeamMax (> 0) is refused
	// with a *ReplayFullError (Team set).
	FirstUse(ctx context.Context, u ReplayUse) (bool, error)
}

// ReplayUse is a use of a signature that a ReplayStore records.
type ReplayUse struct {
	Team    string // the key's team
	TeamMax int    // the most first uses kept of the team; 0 no bound
	Key     string // the key ID
	Sig     []byte
	Now     time.Time
	TTL     time.Duration
	Grace   time.Duration
}

// NewVerifier returns a Verifier for cfg.
func NewVerifier(cfg VerifierConfig) *Verifier {
	if cfg.MaxSkew <= 0 {
		cfg.MaxSkew = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Record == nil {
		cfg.Record = NewReplayRecord()
	}
	v := &Verifier{maxSkew: cfg.MaxSkew, now: cfg.Now, grace: cfg.ReplayGrace, sharedFailed: cfg.SharedFailed, record: cfg.Record}
	if cfg.ReplayProtection {
		v.replay = cfg.Record
		v.replay.configure(2*cfg.MaxSkew, cfg.ReplayMaxEntries, cfg.ReplayShares, cfg.Now())
		v.shares = cfg.ReplayShares
		v.shared = cfg.Shared
	}
	return v
}

// WithSettings returns a Verifier for cfg that takes over v's record of
// signatures (cfg.Record is ignored): the verifier to use after a reload
// that changes any setting, so that no signature accepted by v can be
// replayed. The grace applies to the first uses recorded by v as to its
// own, since a record keeps the time of each first use. A longer MaxSkew
// keeps signatures longer at once; a shorter one lets them go sooner only
// once v's ttl (2×MaxSkew) has passed, since v accepted them with its
// larger skew. v goes on working, on the same record, for the requests it
// is checking. The record is kept while replay protection is off, and used again when
// it is turned back on (the signatures accepted meanwhile are not in it).
func (v *Verifier) WithSettings(cfg VerifierConfig) *Verifier {
	cfg.Record = v.record
	return NewVerifier(cfg)
}

// ReplayRecord returns v's record of signatures, to give to the Verifier
// that replaces it (VerifierConfig.Record).
func (v *Verifier) ReplayRecord() *ReplayRecord { return v.record }

// Stats returns the size of the replay record and its refusals. It first
// drops the generations that have expired, so that an idle gateway whose
// metrics are read gives their memory back.
func (v *Verifier) Stats() ReplayStats {
	if v.replay != nil {
		v.replay.expire(v.now())
	}
	return v.record.Stats()
}

// Result is what Check learned of a request, also when it failed. It
// carries what Record needs: the key, the signature and the time of the
// check (never a secret).
type Result struct {
	Principal *Principal    // set when the key is known
	Skew      time.Duration // server time minus request time, set when the timestamp parsed

	checked bool      // Check accepted the request
	at      time.Time // when it was checked
	sig     [sha256.Size]byte
	key     replayKey // of Principal.KeyID and sig, when hashed
	hashed  bool
	gen     uint64 // the replay record's rotation count when Check found the signature unseen
	unseen  bool
}

// errUnchecked is the error of Record of a Result that Check refused.
var errUnchecked = errors.New("auth: recording a request that was not checked")

// Verify checks r as Check does, and records its signature as Record does:
// for callers that admit every request that authenticates.
func (v *Verifier) Verify(ks *KeyStore, r *http.Request) (Result, error) {
	res, err := v.Check(ks, r)
	if err != nil {
		return res, err
	}
	return res, v.Record(r.Context(), res)
}

// Check checks the authentication headers of r against ks: the key must be
// known, the timestamp within the skew, the signature that of the raw
// request target r.RequestURI under one of the key's secrets, and (when
// replay protection is on) not used before, but within the grace. It
// records nothing: a caller that admits the request (its rate limits, say)
// then calls Record with the Result, so that the requests refused meanwhile
// take no room in the record. With the record full, a signature not in it
// is refused at once (ErrReplayFull), since Record would refuse it. The
// shared store (VerifierConfig.Shared) is not asked: it records as it
// answers, and Record asks it. The returned error is one of the sentinel
// errors of this package, or a *ReplayFullError.
func (v *Verifier) Check(ks *KeyStore, r *http.Request) (Result, error) {
	return v.CheckAt(ks, r, time.Time{})
}

// CheckAt is Check at now, a reading of the verifier's clock
// (VerifierConfig.Now) the caller already made; the zero time reads the
// clock.
func (v *Verifier) CheckAt(ks *KeyStore, r *http.Request, now time.Time) (Result, error) {
	var c Credentials
	if err := parseCredentials(r.Header, &c); err != nil {
		return Result{}, err
	}
	c.Signature = c.sig[:] // c stays on this stack
	if now.IsZero() {
		now = v.now()
	}
	res := Result{Skew: now.Sub(c.Time())}
	p, ok := ks.Lookup(c.KeyID)
	if !ok {
		return res, ErrUnknownKey
	}
	res.Principal = p
	uri := r.RequestURI
	if uri == "" { // a request built in-process rather than read from the wire
		uri = r.URL.RequestURI()
	}
	valid := false
	for _, s := range p.secrets {
		if s.valid(&c, r.Method, uri, EmptyBodyHash) {
			valid = true
			break
		}
	}
	if !valid {
		return res, ErrBadSignature
	}
	if res.Skew > v.maxSkew || res.Skew < -v.maxSkew {
		return res, ErrSkew
	}
	if v.replay != nil {
		res.key, res.hashed = replayKeyOf(c.KeyID, c.Signature), true
		var err error
		if res.gen, res.unseen, err = v.replay.peek(res.key, p.Team.Name, now, v.grace); err != nil {
			return res, err
		}
	}
	res.checked, res.at, res.sig = true, now, c.sig
	return res, nil
}

// Record records the signature of a request that Check accepted (res) and
// the caller admitted. It is atomic: of identical requests checked at once,
// the first recorded is the first use, and the others are refused with
// ErrReplay unless within the grace of it. It also refuses ErrReplayFull
// (a *ReplayFullError) when the record has no room left, and ErrReplay when
// the shared store (VerifierConfig.Shared) has seen the signature; the
// shared store's failures go to SharedFailed, and the verifier's own record
// decides meanwhile. With replay protection off it does nothing.
func (v *Verifier) Record(ctx context.Context, res Result) error {
	if !res.checked {
		return errUnchecked
	}
	if v.replay == nil {
		return nil
	}
	if !res.hashed { // checked by a verifier without replay protection
		res.key = replayKeyOf(res.Principal.KeyID, res.sig[:])
	}
	if err := v.replay.use(res.key, res.Principal.Team.Name, res.at, v.grace, res.gen, res.unseen); err != nil {
		return err
	}
	if v.shared != nil {
		sig := res.sig // only this copy escapes, and only here
		team := res.Principal.Team.Name
		ok, err := v.shared.FirstUse(ctx, ReplayUse{Team: team, TeamMax: v.shares[team],
			Key: res.Principal.KeyID, Sig: sig[:], Now: res.at, TTL: 2 * v.maxSkew, Grace: v.grace})
		switch {
		case errors.Is(err, ErrReplayFull):
			return err
		case err != nil:
			if v.sharedFailed != nil {
				v.sharedFailed(err)
			}
		case !ok:
			return ErrReplay
		}
	}
	return nil
}

// StillSigns reports whether r's authentication headers hold a valid
// signature of r under one of p's secrets, the timestamp's skew and the
// replay record aside: a reload asks it of an open connection's upgrade
// request, to learn whether the key that opened it still verifies (a
// rotation may have removed the secret it was signed with).
func (p *Principal) StillSigns(r *http.Request) bool {
	var c Credentials
	if parseCredentials(r.Header, &c) != nil || c.KeyID != p.KeyID {
		return false
	}
	c.Signature = c.sig[:]
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	for _, s := range p.secrets {
		if s.valid(&c, r.Method, uri, EmptyBodyHash) {
			return true
		}
	}
	return false
}
