package archive

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"streamgate/don"
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

// ErrRecord is wrapped by FromRecord's errors.
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

// validNetwork is the configuration's grammar of a network's name (1 to
// 63 of a-z, 0-9 and '-'), or of a stream partition's label: a network's
// name, '@' and the partition's name in the same grammar
// (config.PartitionLabel; sharing: credential).
func validNetwork(n string) bool {
	if name, part, ok := strings.Cut(n, "@"); ok {
		return validNetworkName(name) && validNetworkName(part)
	}
	return validNetworkName(n)
}

func validNetworkName(n string) bool {
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

// FromRecord is the report of network that rec, a record read by the
// don package (don.ReadRecord, ReadReport, ReadReports: the one reader of
// a record) and verified there, stands for. raw, when not nil, is the
// record as the upstream sent it: a record that AppendJSON would not
// write back byte for byte (upper-case hex, other spacing or key order)
// is refused, so that what the archive serves is always the upstream's
// bytes. The times must be seconds from 0 to 2^32-1, feedID "0x" and 64
// hex digits, fullReport "0x" and a non-empty even number of hex digits.
func FromRecord(network string, rec don.Record, raw []byte) (Report, error) {
	if !validNetwork(network) {
		return Report{}, fmt.Errorf("%w: network %q is not a network name", ErrRecord, network)
	}
	if rec.ValidFromTimestamp < 0 || rec.ValidFromTimestamp > 1<<32-1 ||
		rec.ObservationsTimestamp < 0 || rec.ObservationsTimestamp > 1<<32-1 {
		return Report{}, fmt.Errorf("%w: a time beyond 0 to 4294967295", ErrRecord)
	}
	stream := feedid.ID(feedid.Canon(rec.FeedID))
	if _, err := streamBytes(stream); err != nil {
		return Report{}, fmt.Errorf("%w: feedID is not 0x and 64 hex digits", ErrRecord)
	}
	full := rec.FullReport
	if len(full) < 4 || full[0] != '0' || full[1] != 'x' || len(full)%2 != 0 {
		return Report{}, fmt.Errorf("%w: fullReport is not 0x and a non-empty even number of hex digits", ErrRecord)
	}
	b, err := hex.DecodeString(full[2:])
	if err != nil {
		return Report{}, fmt.Errorf("%w: fullReport is not 0x and a non-empty even number of hex digits", ErrRecord)
	}
	r := Report{Network: network, Stream: stream, ValidFromTimestamp: uint32(rec.ValidFromTimestamp),
		ObservationsTimestamp: uint32(rec.ObservationsTimestamp), FullReport: b}
	if raw != nil && !bytes.Equal(r.AppendJSON(make([]byte, 0, len(raw))), raw) {
		return Report{}, fmt.Errorf("%w: the record is not in the form the archive writes back (lower-case hex, no spaces, the upstream's key order)", ErrRecord)
	}
	return r, nil
}

// Record is r's record as the don package reads it, for verification.
func (r *Report) Record() don.Record {
	return don.Record{FeedID: string(r.Stream), ValidFromTimestamp: int64(r.ValidFromTimestamp),
		ObservationsTimestamp: int64(r.ObservationsTimestamp), FullReport: "0x" + hex.EncodeToString(r.FullReport)}
}
