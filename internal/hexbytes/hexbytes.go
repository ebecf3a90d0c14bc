// Package hexbytes is the one hex decoder of the tree for fixed-size
// values (signatures, stream IDs): it decodes into the caller's array
// without allocating, and in time that depends only on the length, since
// it also reads the signatures clients send.
package hexbytes

// Decode decodes s, exactly 2×len(dst) hex digits of either case, into
// dst. It reports false, with dst's content unspecified, when s has
// another length or a byte that is not a hex digit.
func Decode(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	bad := byte(0)
	for i := range dst {
		a, b := value[s[2*i]], value[s[2*i+1]]
		bad |= a | b
		dst[i] = a<<4 | b&0x0f
	}
	return bad&0x80 == 0
}

// value maps a hex digit to its value and any other byte to 0xff.
var value = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c-'a') + 10
		t[c-'a'+'A'] = byte(c-'a') + 10
	}
	return t
}()
