// Package don checks Data Streams reports against the signatures of the
// decentralised oracle network (DON) that produced them, as the Verifier
// contract does on chain, and decodes them.
//
// A fullReport is abi.encode(bytes32[3] reportContext, bytes reportBlob,
// bytes32[] rawRs, bytes32[] rawSs, bytes32 rawVs). The DON's nodes sign
// keccak256(keccak256(reportBlob) ‖ reportContext[0] ‖ reportContext[1] ‖
// reportContext[2]); signature i is (rawRs[i], rawSs[i], v = byte i of
// rawVs), and the signer is found by secp256k1 public-key recovery. A
// report is verified, exactly as the Verifier contract decides, when its
// config digest (reportContext[0]) is one the operator trusts and it
// carries exactly f+1 signatures, each by a distinct signer of that
// configuration. The contract reverts with IncorrectSignatureCount on any
// other number of signatures, so a report with f+2 valid signatures, which
// no on-chain consumer could verify, is refused too (too_many_signers).
//
// The trust comes from the configuration alone: the config digests, f and
// the signer addresses of each DON configuration, which an operator copies
// from the Verifier contract's ConfigSet events (or, for the built-in
// simulator, from what it prints). Nothing here calls a chain.
package don

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
)

// Config is one DON configuration to trust.
type Config struct {
	// Digest is the config digest, the first word of a report's context.
	Digest [32]byte
	// F is the number of faulty signers the configuration tolerates: a
	// report needs exactly F+1 signatures of distinct signers of it.
	F int
	// Signers are the configuration's signer addresses.
	Signers []common.Address
}

// Cause is why a report was not verified; "" when it was.
type Cause string

// The causes of a refusal, in the order they are checked. Each is a label
// value of the gateway's counters.
const (
	// CauseOversize: the report is larger than a report can be
	// (MaxRecordSize, MaxReportSize). Refused in every mode, before it is
	// decoded (record.go).
	CauseOversize Cause = "oversize"
	// CauseDuplicateKey: the record repeats a key, or spells one of its
	// fields otherwise (case, escapes), so that JSON parsers disagree on
	// what it says. Refused in every mode (record.go).
	CauseDuplicateKey Cause = "duplicate_key"
	// CauseMalformed: the fullReport is not the ABI encoding of the
	// envelope (or not its canonical encoding: offsets, lengths or padding
	// an encoder would not write), its reportBlob is too short for the
	// header every schema starts with (Header: feedId and times), or the
	// signature lists differ in length. The blob's other fields are not
	// read: a report of a schema the gateway does not decode verifies as
	// any other.
	CauseMalformed Cause = "malformed"
	// CauseTrailingBytes: the fullReport is the canonical encoding of its
	// envelope followed by bytes that belong to nothing: unsigned, they
	// would be served and cached with the report.
	CauseTrailingBytes Cause = "trailing_bytes"
	// CauseRecordMismatch: the record's feedID, validFromTimestamp or
	// observationsTimestamp is not its signed report's: a genuine report
	// relabelled (an old one dated now, or another stream's).
	CauseRecordMismatch Cause = "record_mismatch"
	// CauseUnknownDigest: the config digest is none of the trusted
	// configurations. Most likely the DON changed its configuration (new
	// keys): update the DON configuration.
	CauseUnknownDigest Cause = "unknown_digest"
	// CauseInvalidSignature: a signature recovers to no public key.
	CauseInvalidSignature Cause = "invalid_signature"
	// CauseUnknownSigner: a signature recovers to an address outside the
	// configuration's signers: the report or a signature was altered, or
	// signed by someone else.
	CauseUnknownSigner Cause = "unknown_signer"
	// CauseDuplicateSigner: two signatures of the same signer.
	CauseDuplicateSigner Cause = "duplicate_signer"
	// CauseTooFewSigners: no more than f signatures.
	CauseTooFewSigners Cause = "too_few_signers"
	// CauseTooManySigners: more than f+1 signatures, all valid and
	// distinct: the chain's Verifier requires exactly f+1 and reverts
	// (IncorrectSignatureCount).
	CauseTooManySigners Cause = "too_many_signers"
)

// Causes lists every cause.
var Causes = []Cause{CauseOversize, CauseDuplicateKey, CauseMalformed, CauseTrailingBytes, CauseRecordMismatch, CauseUnknownDigest, CauseInvalidSignature, CauseUnknownSigner, CauseDuplicateSigner, CauseTooFewSigners, CauseTooManySigners}

// Meaning is what a cause tells an operator.
func (c Cause) Meaning() string {
	switch c {
	case CauseOversize:
		return "the report is larger than any report can be: refused in every mode, never decoded or cached"
	case CauseDuplicateKey:
		return "the report's record repeats a key (or spells a field otherwise), so that clients could read another stream or time than the one checked: refused in every mode"
	case CauseMalformed:
		return "the report is not a well-formed report"
	case CauseTrailingBytes:
		return "the fullReport carries bytes after its signed envelope's end: not the canonical encoding"
	case CauseRecordMismatch:
		return "the record's feedID or timestamps are not those of its signed report: a genuine report relabelled (an old one dated anew, or another stream's)"
	case CauseUnknownDigest:
		return "the report's config digest is not in the trusted DON configuration: if the DON rotated its keys, update the DON configuration"
	case CauseInvalidSignature:
		return "a signature of the report recovers to no key: the report was altered"
	case CauseUnknownSigner:
		return "a signature of the report is not by a signer of its DON configuration: the report was altered or forged"
	case CauseDuplicateSigner:
		return "the report carries two signatures of the same signer: forged"
	case CauseTooFewSigners:
		return "the report has no more than f signatures of its DON configuration"
	case CauseTooManySigners:
		return "the report has more than f+1 signatures of its DON configuration: the chain's Verifier, which requires exactly f+1, would reject it"
	}
	return "verified"
}

// Result is the outcome of verifying one report.
type Result struct {
	// Cause is "" when the report is verified.
	Cause Cause
	// Signers is the number of distinct trusted signers recovered (on
	// success, the number of signatures).
	Signers int
	// Digest is the report's config digest (zero when malformed).
	Digest [32]byte
}

// OK reports whether the report was verified.
func (r Result) OK() bool { return r.Cause == "" }

// Verifier checks reports against a fixed set of DON configurations. It is
// immutable and safe for concurrent use.
type Verifier struct {
	configs map[[32]byte]*trusted
}

type trusted struct {
	f       int
	signers map[common.Address]struct{}
}

// NewVerifier returns a Verifier of configs. Each digest may appear once;
// each configuration needs more than f signers, all distinct, and f ≥ 1
// is not required (f = 0 trusts exactly one signature).
func NewVerifier(configs []Config) (*Verifier, error) {
	v := &Verifier{configs: make(map[[32]byte]*trusted, len(configs))}
	for i, c := range configs {
		if _, dup := v.configs[c.Digest]; dup {
			return nil, fmt.Errorf("don: configuration %d: config digest 0x%x given twice", i, c.Digest)
		}
		if c.F < 0 {
			return nil, fmt.Errorf("don: configuration %d: f must not be negative", i)
		}
		t := &trusted{f: c.F, signers: make(map[common.Address]struct{}, len(c.Signers))}
		for _, s := range c.Signers {
			if _, dup := t.signers[s]; dup {
				return nil, fmt.Errorf("don: configuration %d: signer %s given twice", i, s.Hex())
			}
			t.signers[s] = struct{}{}
		}
		if len(t.signers) <= c.F {
			return nil, fmt.Errorf("don: configuration %d: %d signers cannot make more than f = %d signatures", i, len(t.signers), c.F)
		}
		v.configs[c.Digest] = t
	}
	return v, nil
}

// covers reports whether v trusts every configuration old trusts, each
// with the same f and signers: whatever verified under old verifies
// under v.
func (v *Verifier) covers(old *Verifier) bool {
	if old == nil {
		return true
	}
	for d, o := range old.configs {
		n := v.configs[d]
		if n == nil || n.f != o.f || len(n.signers) != len(o.signers) {
			return false
		}
		for a := range o.signers {
			if _, ok := n.signers[a]; !ok {
				return false
			}
		}
	}
	return true
}

// Len returns the number of configurations trusted.
func (v *Verifier) Len() int { return len(v.configs) }

// maxSigners bounds the signatures of a report: rawVs holds one byte each.
const maxSigners = 32

// Verify checks a fullReport (its bytes, not hex).
func (v *Verifier) Verify(fullReport []byte) Result {
	env, err := DecodeEnvelope(fullReport)
	if err != nil {
		return Result{Cause: CauseOf(err)}
	}
	return v.verifyEnvelope(env)
}

// VerifyHex checks a fullReport given as "0x" and hex digits. feedID, when
// not "", must be the report's stream (0x and 64 hex digits, any case);
// the record's times are not compared (VerifyRecord does).
func (v *Verifier) VerifyHex(fullReport, feedID string) Result {
	return v.verifyHex(fullReport, func(h Header) bool {
		if feedID == "" {
			return true
		}
		id, ok := hexBytes(feedID)
		return ok && len(id) == 32 && [32]byte(id) == h.FeedID
	})
}

// VerifyRecord checks a report record: its fullReport's signatures, and
// that every field the record repeats of the signed blob (feedID,
// validFromTimestamp, observationsTimestamp) is the blob's.
func (v *Verifier) VerifyRecord(r Record) Result {
	return v.verifyHex(r.FullReport, func(h Header) bool { return h.Repeats(r) })
}

// verifyHex decodes a fullReport, checks its blob's Header with repeats
// (CauseRecordMismatch when it says no) and then its signatures.
func (v *Verifier) verifyHex(fullReport string, repeats func(Header) bool) Result {
	if len(fullReport) > 2+2*MaxReportSize {
		return Result{Cause: CauseOversize}
	}
	b, ok := hexBytes(fullReport)
	if !ok {
		return Result{Cause: CauseMalformed}
	}
	env, err := DecodeEnvelope(b)
	if err != nil {
		return Result{Cause: CauseOf(err)}
	}
	h, err := ReadHeader(env.ReportBlob)
	if err != nil {
		return Result{Cause: CauseMalformed, Digest: env.ReportContext[0]}
	}
	if !repeats(h) {
		return Result{Cause: CauseRecordMismatch, Digest: env.ReportContext[0]}
	}
	return v.verifyEnvelope(env)
}

func (v *Verifier) verifyEnvelope(env *Envelope) Result {
	res := Result{Digest: env.ReportContext[0]}
	if len(env.RawRs) != len(env.RawSs) || len(env.RawRs) > maxSigners {
		res.Cause = CauseMalformed
		return res
	}
	t := v.configs[res.Digest]
	if t == nil {
		res.Cause = CauseUnknownDigest
		return res
	}
	hash := SignedHash(env.ReportContext, env.ReportBlob)
	var seen [maxSigners]common.Address
	var sig [65]byte
	cause := Cause("")
	for i := range env.RawRs {
		copy(sig[:32], env.RawRs[i][:])
		copy(sig[32:64], env.RawSs[i][:])
		sig[64] = env.RawVs[i]
		pub, err := crypto.Ecrecover(hash[:], sig[:])
		if err != nil || len(pub) != 65 {
			res.Cause = CauseInvalidSignature
			return res
		}
		var addr common.Address
		copy(addr[:], crypto.Keccak256(pub[1:])[12:])
		if _, ok := t.signers[addr]; !ok {
			res.Cause = CauseUnknownSigner
			return res
		}
		for _, s := range seen[:res.Signers] {
			if s == addr && cause == "" {
				cause = CauseDuplicateSigner
			}
		}
		if cause == "" {
			seen[res.Signers] = addr
			res.Signers++
		}
	}
	switch {
	case cause != "":
		res.Cause = cause
	case res.Signers <= t.f:
		res.Cause = CauseTooFewSigners
	case res.Signers > t.f+1:
		res.Cause = CauseTooManySigners
	}
	return res
}

// SignedHash is what the DON's nodes sign: keccak256(keccak256(reportBlob)
// ‖ reportContext[0] ‖ reportContext[1] ‖ reportContext[2]).
func SignedHash(ctx [3][32]byte, blob []byte) [32]byte {
	var buf [4 * 32]byte
	h := crypto.Keccak256Hash(blob)
	copy(buf[:32], h[:])
	copy(buf[32:], ctx[0][:])
	copy(buf[64:], ctx[1][:])
	copy(buf[96:], ctx[2][:])
	return crypto.Keccak256Hash(buf[:])
}

// Recover returns the address of each signature of env, in order, or an
// error for the first that recovers to no key. It does not look at any
// configuration: the mechanics alone.
func Recover(env *Envelope) ([]common.Address, error) {
	if len(env.RawRs) != len(env.RawSs) || len(env.RawRs) > maxSigners {
		return nil, errors.New("don: signature lists of different lengths")
	}
	hash := SignedHash(env.ReportContext, env.ReportBlob)
	out := make([]common.Address, len(env.RawRs))
	for i := range env.RawRs {
		sig := make([]byte, 65)
		copy(sig[:32], env.RawRs[i][:])
		copy(sig[32:64], env.RawSs[i][:])
		sig[64] = env.RawVs[i]
		pub, err := crypto.SigToPub(hash[:], sig)
		if err != nil {
			return nil, fmt.Errorf("don: signature %d: %w", i, err)
		}
		out[i] = crypto.PubkeyToAddress(*pub)
	}
	return out, nil
}

// hexBytes decodes "0x" and an even number of hex digits.
func hexBytes(s string) ([]byte, bool) {
	if len(s) < 2 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return nil, false
	}
	b, err := hex.DecodeString(s[2:])
	return b, err == nil
}

// ParseDigest parses a config digest: 0x and 64 hex digits.
func ParseDigest(s string) ([32]byte, error) {
	var d [32]byte
	b, ok := hexBytes(s)
	if !ok || len(b) != 32 {
		return d, fmt.Errorf("%q is not a config digest (0x and 64 hex digits)", s)
	}
	copy(d[:], b)
	return d, nil
}

// ParseAddress parses a signer address: 0x and 40 hex digits. A mixed-case
// address must carry a valid EIP-55 checksum.
func ParseAddress(s string) (common.Address, error) {
	b, ok := hexBytes(s)
	if !ok || len(b) != 20 {
		return common.Address{}, fmt.Errorf("%q is not an address (0x and 40 hex digits)", s)
	}
	a := common.BytesToAddress(b)
	if body := s[2:]; body != strings.ToLower(body) && body != strings.ToUpper(body) && a.Hex() != "0x"+body {
		return common.Address{}, fmt.Errorf("%q has a wrong EIP-55 checksum", s)
	}
	return a, nil
}
