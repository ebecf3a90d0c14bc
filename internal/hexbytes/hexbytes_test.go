package hexbytes

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDecode(t *testing.T) {
	var d [4]byte
	assert.True(t, Decode(d[:], "00aBcDeF"[:8]))
	assert.Equal(t, [4]byte{0x00, 0xab, 0xcd, 0xef}, d)
	for _, bad := range []string{"00abcde", "00abcdef0", "00abcdeg", "0xabcdef", " 0abcdef", "00ab\x00def"} {
		assert.False(t, Decode(d[:], bad), "%q", bad)
	}
	assert.True(t, Decode(nil, ""))
}

// FuzzDecode holds Decode to encoding/hex on every input.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{"", "00", "ff", "FF", "fG", "0x12", "deadBEEF", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dst := make([]byte, len(s)/2)
		ok := Decode(dst, s)
		want, err := hex.DecodeString(s)
		if (err == nil) != ok {
			t.Fatalf("Decode(%q) = %v, encoding/hex says %v", s, ok, err)
		}
		if ok && !bytes.Equal(dst, want) {
			t.Fatalf("Decode(%q) = %x, want %x", s, dst, want)
		}
	})
}
