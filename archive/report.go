package archive

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"streamgate/feedid"
)

// Report is one verified report as the archive keeps it: its network (a
// configured network's name, "testnet", "mainnet"), its stream, the two
// times of its record (seconds, uint32 as the ABI of the schemas has them)
// and its fullReport as bytes (the record's hex decoded: half the room,
// and one canonical form).
type Report struct {
	Network               string
	Stream                feedid.ID
	ValidFromTimestamp    uint32
	ObservationsTimestamp uint32
	FullReport            []byte
}

// ErrRecord is wrapped by ParseRecord's errors.
var ErrRecord = errors.New("archive: not a report record")

// streamBytes returns the 32 bytes of a canonical stream ID.
func streamBytes(id feedid.ID) ([32]byte, error) {
	var b [32]byte
	if len(id) != feedid.Len || id[0] != '0' || id[1] != 'x' {
		return b, fmt.Errorf("archive: %q is not a canonical stream ID", string(id))
	}
	if _, err := hex.Decode(b[:], []byte(id[2:])); err != nil {
		return b, fmt.Errorf("archive: %q is not a canonical stream ID", string(id))
	}
	return b, nil
}

// streamID returns the canonical stream ID of 32 bytes.
func streamID(b []byte) feedid.ID {
	out := make([]byte, 2, feedid.Len)
	out[0], out[1] = '0', 'x'
	return feedid.ID(hex.AppendEncode(out, b))
}

// check reports why r cannot be stored, nil when it can.
func (r *Report) check() error {
	if !validNetwork(r.Network) {
		return fmt.Errorf("archive: network %q is not a network name", r.Network)
	}
	if _, err := streamBytes(r.Stream); err != nil {
		return err
	}
	if len(r.FullReport) == 0 {
		return fmt.Errorf("archive: report of %s at %d has an empty fullReport", r.Stream, r.ObservationsTimestamp)
	}
	return nil
}

// validNetwork is the configuration's grammar of a network's name:
// 1 to 63 of a-z, 0-9 and '-'.
func validNetwork(n string) bool {
	if len(n) == 0 || len(n) > 63 {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// AppendJSON appends r's record as the upstream writes it, byte for byte:
// {"feedID":"0x…","validFromTimestamp":N,"observationsTimestamp":N,
// "fullReport":"0x…"}, no spaces, lower-case hex. The REST answers wrap it
// in {"report":…} or {"reports":[…]}, the stream's frames in {"report":…}.
func (r *Report) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"feedID":"`...)
	dst = append(dst, r.Stream...)
	dst = append(dst, `","validFromTimestamp":`...)
	dst = strconv.AppendUint(dst, uint64(r.ValidFromTimestamp), 10)
	dst = append(dst, `,"observationsTimestamp":`...)
	dst = strconv.AppendUint(dst, uint64(r.ObservationsTimestamp), 10)
	dst = append(dst, `,"fullReport":"0x`...)
	dst = hex.AppendEncode(dst, r.FullReport)
	return append(dst, `"}`...)
}

// JSON returns r's record (AppendJSON).
func (r *Report) JSON() []byte {
	return r.AppendJSON(make([]byte, 0, 128+2*len(r.FullReport)))
}

// ParseRecord reads one report record of network, strictly: a JSON object
// with the keys feedID, validFromTimestamp, observationsTimestamp and
// fullReport, each once, in any order, and no other; feedID "0x" and 64
// lower-case hex digits, fullReport "0x" and a non-empty even number of
// lower-case hex digits, the times integers from 0 to 2^32-1 written
// without sign, fraction, exponent or leading zero; JSON whitespace between
// the tokens, none in the strings, no escapes. What it accepts AppendJSON
// writes back in the upstream's form (the same bytes when the record was
// in it).
func ParseRecord(network string, b []byte) (Report, error) {
	r := Report{Network: network}
	if !validNetwork(network) {
		return Report{}, fmt.Errorf("%w: network %q is not a network name", ErrRecord, network)
	}
	p := parser{b: b}
	if !p.byte('{') {
		return Report{}, p.fail("an object")
	}
	var seen [4]bool
	for i := range 4 {
		if i > 0 && !p.byte(',') {
			return Report{}, p.fail("',' and the next key")
		}
		key, ok := p.str()
		if !ok {
			return Report{}, p.fail("a key")
		}
		if !p.byte(':') {
			return Report{}, p.fail("':'")
		}
		var k int
		switch string(key) {
		case "feedID":
			k = 0
			v, ok := p.str()
			if !ok || !lowerHex(v, 64) {
				return Report{}, p.fail("feedID as 0x and 64 lower-case hex digits")
			}
			r.Stream = feedid.ID(v)
		case "validFromTimestamp":
			k = 1
			n, ok := p.uint32()
			if !ok {
				return Report{}, p.fail("validFromTimestamp as an integer from 0 to 4294967295")
			}
			r.ValidFromTimestamp = n
		case "observationsTimestamp":
			k = 2
			n, ok := p.uint32()
			if !ok {
				return Report{}, p.fail("observationsTimestamp as an integer from 0 to 4294967295")
			}
			r.ObservationsTimestamp = n
		case "fullReport":
			k = 3
			v, ok := p.str()
			if !ok || !lowerHex(v, -1) {
				return Report{}, p.fail("fullReport as 0x and an even number of lower-case hex digits")
			}
			r.FullReport = make([]byte, (len(v)-2)/2)
			_, _ = hex.Decode(r.FullReport, v[2:]) // checked by lowerHex
		default:
			return Report{}, fmt.Errorf("%w: unknown key %q at byte %d", ErrRecord, key, p.i)
		}
		if seen[k] {
			return Report{}, fmt.Errorf("%w: key %q twice", ErrRecord, key)
		}
		seen[k] = true
	}
	if !p.byte('}') {
		return Report{}, p.fail("'}' after the four keys")
	}
	p.space()
	if p.i != len(p.b) {
		return Report{}, p.fail("the end of the record")
	}
	return r, nil
}

// lowerHex reports whether v is "0x" and lower-case hex digits: n of them,
// or (n < 0) a non-zero even number.
func lowerHex(v []byte, n int) bool {
	if len(v) < 2 || v[0] != '0' || v[1] != 'x' {
		return false
	}
	d := v[2:]
	if n >= 0 && len(d) != n || n < 0 && (len(d) == 0 || len(d)%2 != 0) {
		return false
	}
	for _, c := range d {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// parser reads the tokens of one record.
type parser struct {
	b []byte
	i int
}

func (p *parser) fail(want string) error {
	return fmt.Errorf("%w: want %s at byte %d", ErrRecord, want, p.i)
}

func (p *parser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte reads c after optional whitespace.
func (p *parser) byte(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string without escapes or control characters.
func (p *parser) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	j := bytes.IndexByte(p.b[p.i:], '"')
	if j < 0 {
		return nil, false
	}
	s := p.b[p.i : p.i+j]
	for _, c := range s {
		if c == '\\' || c < 0x20 {
			return nil, false
		}
	}
	p.i += j + 1
	return s, true
}

// uint32 reads a JSON integer from 0 to 2^32-1 without leading zeros.
func (p *parser) uint32() (uint32, bool) {
	p.space()
	start := p.i
	var n uint64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		n = n*10 + uint64(p.b[p.i]-'0')
		p.i++
		if n > 1<<32-1 {
			return 0, false
		}
	}
	digits := p.i - start
	if digits == 0 || digits > 1 && p.b[start] == '0' {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	return uint32(n), true
}
