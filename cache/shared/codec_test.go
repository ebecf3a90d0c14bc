package shared

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
)

func TestCodecRoundTrip(t *testing.T) {
	now := time.Unix(1_700_000_000, 123456789)
	for _, e := range []*cache.Entry{
		{Status: 200, Body: []byte(`{"report":{}}`), Stored: now},
		{Status: 200, Body: []byte("x"), Stored: now, Expires: now.Add(time.Second), StaleUntil: now.Add(3 * time.Second)},
		{Status: 200, Body: []byte{}, Stored: now},
	} {
		got, err := decode("k/1", encode("k/1", e))
		require.NoError(t, err)
		assert.Equal(t, e.Status, got.Status)
		assert.Equal(t, string(e.Body), string(got.Body))
		assert.True(t, e.Stored.Equal(got.Stored))
		assert.True(t, e.Expires.Equal(got.Expires), "zero Expires stays zero (immutable)")
		assert.True(t, e.StaleUntil.Equal(got.StaleUntil))
	}
}

// TestCodecRefuses: every way a value can be wrong is refused, each case a
// way Redis could hand back something else than what was written.
func TestCodecRefuses(t *testing.T) {
	good := encode("report/k", &cache.Entry{Status: 200, Body: []byte(`{"report":{"feedID":"0x01"}}`), Stored: time.Unix(1, 0)})
	reseal := func(b []byte) []byte { // a valid checksum over altered content
		binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(b[8:], crcTable))
		return b
	}
	cases := []struct {
		name string
		val  []byte
		key  string
	}{
		{"empty", nil, "report/k"},
		{"another format", append([]byte("SGC2"), good[4:]...), "report/k"},
		{"one bit flipped in the body", func() []byte { b := clone(good); b[len(b)-3] ^= 1; return b }(), "report/k"},
		{"truncated", good[:len(good)-1], "report/k"},
		{"trailing bytes, resealed", reseal(append(clone(good), 'x')), "report/k"},
		{"written under another key", good, "report/other"},
		{"status out of range, resealed", reseal(encode("report/k", &cache.Entry{Status: 9999})), "report/k"},
		{"body length beyond the value, resealed", func() []byte {
			b := clone(good)
			b[len(b)-len(`{"report":{"feedID":"0x01"}}`)-1] = 0x7f
			return reseal(b)
		}(), "report/k"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := decode(c.key, c.val)
			assert.ErrorIs(t, err, errCorrupt)
		})
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func FuzzDecode(f *testing.F) {
	f.Add(encode("k", &cache.Entry{Status: 200, Body: []byte("body")}))
	f.Add([]byte("SGC1\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decode("k", b)
		if err != nil {
			return
		}
		// Whatever decodes survives a round trip unchanged.
		again, err := decode("k", encode("k", e))
		require.NoError(t, err)
		assert.Equal(t, e.Status, again.Status)
		assert.Equal(t, string(e.Body), string(again.Body))
		assert.True(t, e.Expires.Equal(again.Expires))
	})
}
