package auth

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test vector of the official clients.
func TestSignatureVector(t *testing.T) {
	got := SignatureHex([]byte("userSecret"), "GET", "/api/v1/feeds", EmptyBodyHash, "clientId", "1718885772")
	assert.Equal(t, "e9b2aa1deb13b2abd078353a5e335b2f50307159ad28b433157d2c74dbab2072", got)
	assert.Equal(t, EmptyBodyHash, BodyHash(nil))
}

func TestSignThenVerify(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/api/v1/reports/bulk?feedIDs=0xab%2C0xcd&timestamp=1", nil)
	now := time.UnixMilli(1_700_000_000_123)
	Sign(req, "key-1", []byte("s3cret"), now)

	c, err := ParseCredentials(req.Header)
	require.NoError(t, err)
	assert.Equal(t, "key-1", c.KeyID)
	assert.Equal(t, now, c.Time())
	assert.True(t, c.Valid([]byte("s3cret"), "GET", "/api/v1/reports/bulk?feedIDs=0xab%2C0xcd&timestamp=1", EmptyBodyHash))

	for name, tc := range map[string]struct{ secret, method, uri string }{
		"other secret":          {"other", "GET", "/api/v1/reports/bulk?feedIDs=0xab%2C0xcd&timestamp=1"},
		"other method":          {"s3cret", "HEAD", "/api/v1/reports/bulk?feedIDs=0xab%2C0xcd&timestamp=1"},
		"re-encoded comma":      {"s3cret", "GET", "/api/v1/reports/bulk?feedIDs=0xab,0xcd&timestamp=1"},
		"query dropped":         {"s3cret", "GET", "/api/v1/reports/bulk"},
		"parameter order moved": {"s3cret", "GET", "/api/v1/reports/bulk?timestamp=1&feedIDs=0xab%2C0xcd"},
	} {
		t.Run(name, func(t *testing.T) {
			assert.False(t, c.Valid([]byte(tc.secret), tc.method, tc.uri, EmptyBodyHash))
		})
	}
}

func TestParseCredentials(t *testing.T) {
	good := "e9b2aa1deb13b2abd078353a5e335b2f50307159ad28b433157d2c74dbab2072"
	tests := []struct {
		name         string
		key, ts, sig string
		want         error
	}{
		{"all present", "k", "1718885772000", good, nil},
		{"no key", "", "1718885772000", good, ErrMissingHeaders},
		{"no timestamp", "k", "", good, ErrMissingHeaders},
		{"no signature", "k", "1718885772000", "", ErrMissingHeaders},
		{"timestamp not a number", "k", "soon", good, ErrMalformedHeaders},
		{"negative timestamp", "k", "-5", good, ErrMalformedHeaders},
		{"timestamp overflows", "k", "99999999999999999999", good, ErrMalformedHeaders},
		{"signature short", "k", "1", good[:62], ErrMalformedHeaders},
		{"signature not hex", "k", "1", "zz" + good[2:], ErrMalformedHeaders},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range map[string]string{HeaderAuthorization: tc.key, HeaderTimestamp: tc.ts, HeaderSignature: tc.sig} {
				if v != "" {
					h.Set(k, v)
				}
			}
			_, err := ParseCredentials(h)
			if tc.want == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.want)
			}
		})
	}
}

func FuzzParseCredentials(f *testing.F) {
	f.Add("k", "1718885772000", "e9b2aa1deb13b2abd078353a5e335b2f50307159ad28b433157d2c74dbab2072")
	f.Add("", "x", "00")
	f.Fuzz(func(t *testing.T, key, ts, sig string) {
		h := http.Header{}
		h.Set(HeaderAuthorization, key)
		h.Set(HeaderTimestamp, ts)
		h.Set(HeaderSignature, sig)
		c, err := ParseCredentials(h)
		if err != nil {
			return
		}
		if len(c.Signature) != 32 || c.Timestamp < 0 {
			t.Fatalf("accepted malformed credentials %q %q %q", key, ts, sig)
		}
		// A parsed credential never validates under a signature it does not carry.
		want := SignatureHex([]byte("s"), "GET", "/", EmptyBodyHash, c.KeyID, ts)
		if c.Valid([]byte("s"), "GET", "/", EmptyBodyHash) != strings.EqualFold(want, sig) {
			t.Fatalf("Valid disagrees with the signed string for %q", sig)
		}
	})
}

func BenchmarkVerify(b *testing.B) {
	req := httptest.NewRequest(http.MethodGet, "/api/v1/reports/latest?feedID=0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782", nil)
	Sign(req, "2f6a3c7e-5b1d-4e8a-9c0f-1a2b3c4d5e6f", []byte("secret"), time.Now())
	b.ReportAllocs()
	for b.Loop() {
		c, err := ParseCredentials(req.Header)
		if err != nil || !c.Valid([]byte("secret"), req.Method, req.RequestURI, EmptyBodyHash) {
			b.Fatal("verify failed")
		}
	}
}
