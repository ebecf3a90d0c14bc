package shared

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"time"

	"streamgate/cache"
)

// The encoded form of an entry in Redis:
//
//	"SGC1"                     magic and format version
//	crc32c    uint32 (LE)      CRC-32C of everything after it
//	key       uvarint len, bytes   the cache key the entry was written under
//	status    uvarint
//	stored    varint           Unix nanoseconds
//	expires   varint           Unix nanoseconds, 0 for never
//	staleEnd  varint           Unix nanoseconds, 0 for none
//	body      uvarint len, bytes
//
// and nothing after. The key is echoed so that an entry copied or renamed
// under another key is refused; the checksum catches truncated or altered
// values. It is an integrity check, not an authentication: whoever may
// write to the Redis can forge entries, which is why the caller's Check
// validates the body too (a report's stream, as the fills check upstream
// answers).
const magic = "SGC1"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is what decode returns for any value it refuses.
var errCorrupt = errors.New("shared: corrupt entry")

// encode returns the encoded form of e under key.
func encode(key string, e *cache.Entry) []byte {
	n := len(magic) + 4 + binary.MaxVarintLen64*6 + len(key) + len(e.Body)
	b := make([]byte, len(magic)+4, n)
	copy(b, magic)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(e.Status))
	b = binary.AppendVarint(b, unixNano(e.Stored))
	b = binary.AppendVarint(b, unixNano(e.Expires))
	b = binary.AppendVarint(b, unixNano(e.StaleUntil))
	b = binary.AppendUvarint(b, uint64(len(e.Body)))
	b = append(b, e.Body...)
	binary.LittleEndian.PutUint32(b[len(magic):], crc32.Checksum(b[len(magic)+4:], crcTable))
	return b
}

// decode parses an encoded entry and checks that it was written under key.
// The entry's Body is a copy-free slice of b.
func decode(key string, b []byte) (*cache.Entry, error) {
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return nil, errCorrupt
	}
	sum := binary.LittleEndian.Uint32(b[len(magic):])
	rest := b[len(magic)+4:]
	if crc32.Checksum(rest, crcTable) != sum {
		return nil, errCorrupt
	}
	r := reader{b: rest}
	k := r.bytes()
	status := r.uvarint()
	stored, expires, staleEnd := r.varint(), r.varint(), r.varint()
	body := r.bytes()
	if r.err || len(r.b) != 0 || string(k) != key || status < 100 || status > 599 {
		return nil, errCorrupt
	}
	return &cache.Entry{
		Body: body, Status: int(status),
		Stored: fromUnixNano(stored), Expires: fromUnixNano(expires), StaleUntil: fromUnixNano(staleEnd),
	}, nil
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// reader reads the fields of an encoded entry; err is set by the first
// field that does not fit.
type reader struct {
	b   []byte
	err bool
}

func (r *reader) uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err || n > uint64(len(r.b)) {
		r.err = true
		return nil
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out
}
