package don

import (
	"encoding/binary"
	"fmt"
)

// ReadHeader reads the Header of a report blob of any schema, in the table
// or not, without decoding the rest: the one place that knows where a
// blob keeps its stream and times. From schema V2 on a blob starts with
// feedId (bytes32), validFromTimestamp and observationsTimestamp; a V1
// blob's second field is observationsTimestamp and it has no
// validFromTimestamp. Each is one ABI word; the times are read as unsigned
// integers of at most 64 bits (uint32 in most schemas, uint64 in V14 and
// in later SDKs: the same word).
func ReadHeader(blob []byte) (Header, error) {
	var h Header
	words := 3
	if len(blob) >= 32 && Schema(binary.BigEndian.Uint16(blob[:2])) == SchemaV1 {
		words = 2
	}
	if len(blob) < 32*words {
		return h, fmt.Errorf("%w: blob of %d bytes has no header", ErrMalformed, len(blob))
	}
	h.Schema = Schema(binary.BigEndian.Uint16(blob[:2]))
	copy(h.FeedID[:], blob[:32])
	var ok bool
	if words == 2 {
		h.ObservationsTimestamp, ok = word64(blob[32:64])
	} else {
		var vf, obs bool
		h.ValidFromTimestamp, vf = word64(blob[32:64])
		h.ObservationsTimestamp, obs = word64(blob[64:96])
		h.HasValidFrom, ok = true, vf && obs
	}
	if !ok {
		return Header{}, fmt.Errorf("%w: a timestamp of the blob is wider than 64 bits", ErrMalformed)
	}
	return h, nil
}

// word64 reads an ABI word holding an unsigned integer of at most 64 bits.
func word64(w []byte) (uint64, bool) {
	for _, b := range w[:24] {
		if b != 0 {
			return 0, false
		}
	}
	return binary.BigEndian.Uint64(w[24:32]), true
}

// Record is a report record as the API sends it: the fields it repeats of
// its signed blob, and the fullReport (0x and hex).
type Record struct {
	FeedID                string `json:"feedID"`
	ValidFromTimestamp    int64  `json:"validFromTimestamp"`
	ObservationsTimestamp int64  `json:"observationsTimestamp"`
	FullReport            string `json:"fullReport"`
}

// Repeats reports whether r's feedID (any case) and times are the
// blob's: a genuine report relabelled (an old one dated now, or another
// stream's) is not. A V1 blob has no validFromTimestamp to compare.
func (h Header) Repeats(r Record) bool {
	id, ok := hexBytes(r.FeedID)
	if !ok || len(id) != 32 || [32]byte(id) != h.FeedID {
		return false
	}
	if r.ObservationsTimestamp < 0 || uint64(r.ObservationsTimestamp) != h.ObservationsTimestamp {
		return false
	}
	return !h.HasValidFrom || (r.ValidFromTimestamp >= 0 && uint64(r.ValidFromTimestamp) == h.ValidFromTimestamp)
}
