package upstreamsim

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/ethereum/go-ethereum/crypto"
)

// The simulator is a real DON: every report it serves carries secp256k1
// signatures, by f+1 of the four signers of its network, over the payload
// the Verifier contract checks, keccak256(keccak256(reportBlob) ‖
// reportContext[0] ‖ reportContext[1] ‖ reportContext[2]). The keys are
// derived from DONSeed and the network's name, so every simulator (and
// every test) has the same DON; DON returns its configuration, which is
// what a gateway in front of it trusts. The hashing and signing are
// go-ethereum's crypto; the encoding is the simulator's own (abi.go), so
// that the gateway's decoder is checked against an independent encoder.

// DONSeed is the default seed of the simulated DON's keys.
const DONSeed = "streamgate-simulator/don/v1"

// DONSigners and DONF are the size of the simulated DON and the faults it
// tolerates: a report is signed by DONF+1 of the DONSigners.
const (
	DONSigners = 4
	DONF       = 1
)

// DONConfig is one configuration of the simulated DON: its config digest
// (the first word of a report's context), f and the signer addresses
// (0x and 40 hex digits, EIP-55 checksummed).
type DONConfig struct {
	ConfigDigest string   `json:"configDigest"`
	F            int      `json:"f"`
	Signers      []string `json:"signers"`
}

// Forgery names a way in which the Forge fault falsifies every report
// served while it is set.
type Forgery string

// The forgeries.
const (
	// ForgeSignature flips one bit of the first signature's s.
	ForgeSignature Forgery = "signature"
	// ForgeOutsider has the second signature made by a key outside the DON.
	ForgeOutsider Forgery = "outsider"
	// ForgeTooFew leaves one signature (f of them).
	ForgeTooFew Forgery = "too_few"
	// ForgeTooMany has f+2 distinct signers of the DON sign: every
	// signature is genuine, but the chain's Verifier requires exactly f+1.
	ForgeTooMany Forgery = "too_many"
	// ForgeDuplicate has the same signer sign twice.
	ForgeDuplicate Forgery = "duplicate"
	// ForgeUnknownDigest signs, with the DON's keys, a report whose config
	// digest is not one of the DON's configurations (as after a rotation).
	ForgeUnknownDigest Forgery = "unknown_digest"
	// ForgeRelabel serves, for the report of a second, the genuine report
	// of RelabelAge earlier, as the DON signed it, its record's
	// validFromTimestamp and observationsTimestamp relabelled as the
	// second asked: every signature verifies, only the record lies.
	ForgeRelabel Forgery = "relabel"
	// ForgeDuplicateKey serves the genuine report, its record carrying a
	// second "feedID", another stream's (the network's next), before its
	// own: a decoder that keeps the last of a repeated key reads the
	// genuine record, one that keeps the first reads the other stream.
	ForgeDuplicateKey Forgery = "duplicate_key"
	// ForgeDuplicateKeyLast is ForgeDuplicateKey with the other stream's
	// "feedID" after the record's own.
	ForgeDuplicateKeyLast Forgery = "duplicate_key_last"
	// ForgeTrailing serves the genuine report with a word of zeros (32
	// bytes) appended to its fullReport: every signature verifies, but the
	// encoding is not the canonical one.
	ForgeTrailing Forgery = "trailing"
	// ForgeOversize serves the genuine report with OversizeBytes of zeros
	// appended to its fullReport (twice that in hex): an answer of about
	// 40 MiB. Over the WebSocket its frames exceed the 32 KiB a client
	// reads of one message.
	ForgeOversize Forgery = "oversize"
)

// OversizeBytes is what ForgeOversize appends to a fullReport.
const OversizeBytes = 20 << 20

// RelabelAge is how much older the report ForgeRelabel serves is.
const RelabelAge = 3600

var forgeries = []Forgery{ForgeSignature, ForgeOutsider, ForgeTooFew, ForgeTooMany, ForgeDuplicate, ForgeUnknownDigest, ForgeRelabel,
	ForgeDuplicateKey, ForgeDuplicateKeyLast, ForgeTrailing, ForgeOversize}

// genuine reports whether forge leaves the signatures as the DON made
// them (only the record or the fullReport's encoding lies).
func (f Forgery) genuine() bool {
	switch f {
	case ForgeRelabel, ForgeDuplicateKey, ForgeDuplicateKeyLast, ForgeTrailing, ForgeOversize:
		return true
	}
	return false
}

// don holds the keys of one network's DON.
type don struct {
	signers  [DONSigners]*ecdsa.PrivateKey
	outsider *ecdsa.PrivateKey
}

// deriveKey returns a secp256k1 key that is a pure function of label.
func deriveKey(label string) *ecdsa.PrivateKey {
	for i := 0; ; i++ {
		k := crypto.Keccak256([]byte(label + "/" + strconv.Itoa(i)))
		if key, err := crypto.ToECDSA(k); err == nil {
			return key
		}
	}
}

func newDON(seed, network string) *don {
	d := &don{outsider: deriveKey(seed + "/" + network + "/outsider")}
	for i := range d.signers {
		d.signers[i] = deriveKey(seed + "/" + network + "/signer/" + strconv.Itoa(i))
	}
	return d
}

// configDigest is the config digest of the network's reports of schema s.
func configDigest(network string, s Schema) [32]byte {
	digest := sha256.Sum256([]byte("streamgate-simulator/config/" + network + "/" + s.String()))
	digest[0], digest[1] = 0x00, 0x09 // the prefix of an EVM config digest
	return digest
}

// configs returns the DON's configurations on network: one per schema
// (Schemas), the same signers.
func (d *don) configs(network string) []DONConfig {
	signers := make([]string, len(d.signers))
	for i, k := range d.signers {
		signers[i] = crypto.PubkeyToAddress(k.PublicKey).Hex()
	}
	var out []DONConfig
	for _, s := range Schemas {
		dg := configDigest(network, s)
		out = append(out, DONConfig{ConfigDigest: "0x" + hex.EncodeToString(dg[:]), F: DONF, Signers: signers})
	}
	return out
}

// sign sets the signatures of r, made by DONF+1 signers chosen by ts (so
// that every signer signs some reports), falsified as forge says.
func (d *don) sign(r *FullReport, ts int64, forge Forgery) {
	if forge.genuine() {
		forge = "" // the report is genuine; its record or encoding lies (appendReportJSON)
	}
	if forge == ForgeUnknownDigest {
		r.ReportContext[0][31] ^= 0xff
	}
	first := int(uint64(ts) % DONSigners)
	keys := []*ecdsa.PrivateKey{d.signers[first], d.signers[(first+1)%DONSigners]}
	switch forge {
	case ForgeOutsider:
		keys[1] = d.outsider
	case ForgeTooFew:
		keys = keys[:1]
	case ForgeTooMany:
		keys = append(keys, d.signers[(first+2)%DONSigners])
	case ForgeDuplicate:
		keys[1] = keys[0]
	}
	hash := signedHash(r)
	r.RawRs, r.RawSs, r.RawVs = make([][32]byte, len(keys)), make([][32]byte, len(keys)), [32]byte{}
	for i, k := range keys {
		sig, err := crypto.Sign(hash[:], k)
		if err != nil {
			panic("simulator: signing: " + err.Error()) // a 32-byte hash and a valid key never fail
		}
		copy(r.RawRs[i][:], sig[:32])
		copy(r.RawSs[i][:], sig[32:64])
		r.RawVs[i] = sig[64]
	}
	if forge == ForgeSignature {
		r.RawSs[0][31] ^= 0x01
	}
}

// signedHash is keccak256(keccak256(reportBlob) ‖ reportContext[0..2]).
func signedHash(r *FullReport) [32]byte {
	var buf [4 * word]byte
	copy(buf[:word], crypto.Keccak256(r.ReportBlob))
	for i := range r.ReportContext {
		copy(buf[(1+i)*word:], r.ReportContext[i][:])
	}
	var h [32]byte
	copy(h[:], crypto.Keccak256(buf[:]))
	return h
}

// DON returns the configurations of network's DON, what a gateway in front
// of this simulator trusts. It panics on an unknown network.
func (s *Simulator) DON(network string) []DONConfig {
	return s.network(network).don.configs(network)
}

// DONYAML returns the DON configurations of every network as the
// gateway's configuration takes them (networks.<n>.verify.dons).
func (s *Simulator) DONYAML() string {
	out := ""
	for _, name := range []string{Mainnet, Testnet} {
		out += fmt.Sprintf("# networks.%s.verify.dons\n", name)
		for _, c := range s.DON(name) {
			out += fmt.Sprintf("- config_digest: %q\n  f: %d\n  signers:\n", c.ConfigDigest, c.F)
			for _, a := range c.Signers {
				out += fmt.Sprintf("    - %q\n", a)
			}
		}
	}
	return out
}
