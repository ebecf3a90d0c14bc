package upstreamsim

import (
	"encoding/hex"
	"encoding/json"
	"math/big"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type realReport struct {
	FeedID     string `json:"feedID"`
	FullReport string `json:"fullReport"`
	Bytes      int    `json:"bytes"`
	Decoded    struct {
		Schema                string `json:"schema"`
		FeedID                string `json:"feedId"`
		ValidFromTimestamp    uint32 `json:"validFromTimestamp"`
		ObservationsTimestamp uint32 `json:"observationsTimestamp"`
		NativeFee             string `json:"nativeFee"`
		LinkFee               string `json:"linkFee"`
		ExpiresAt             uint32 `json:"expiresAt"`
		Price                 string `json:"price"`
		Bid                   string `json:"bid"`
		Ask                   string `json:"ask"`
	} `json:"decoded"`
}

func loadReal(t *testing.T) (realReport, []byte) {
	t.Helper()
	raw, err := os.ReadFile("testdata/real-v3-report.json")
	require.NoError(t, err)
	var r realReport
	require.NoError(t, json.Unmarshal(raw, &r))
	b, err := hex.DecodeString(r.FullReport[2:])
	require.NoError(t, err)
	return r, b
}

func bigOf(t *testing.T, s string) *big.Int {
	t.Helper()
	v, ok := new(big.Int).SetString(s, 10)
	require.True(t, ok, s)
	return v
}

// The decoder reads the real report of the public testnet to the values
// the official SDK decodes.
func TestDecodeRealV3Report(t *testing.T) {
	real, b := loadReal(t)
	require.Len(t, b, real.Bytes)
	require.Len(t, b, 736)

	fr, err := DecodeFullReport(b)
	require.NoError(t, err)
	assert.Len(t, fr.ReportBlob, 9*word)
	assert.Len(t, fr.RawRs, 2)
	assert.Len(t, fr.RawSs, 2)

	f, err := DecodeReportBlob(fr.ReportBlob)
	require.NoError(t, err)
	d := real.Decoded
	assert.Equal(t, SchemaV3, f.Schema)
	assert.Equal(t, d.Schema, f.Schema.String())
	assert.Equal(t, d.FeedID, "0x"+hex.EncodeToString(f.FeedID[:]))
	assert.Equal(t, real.FeedID, "0x"+hex.EncodeToString(f.FeedID[:]))
	assert.Equal(t, d.ValidFromTimestamp, f.ValidFromTimestamp)
	assert.Equal(t, d.ObservationsTimestamp, f.ObservationsTimestamp)
	assert.Equal(t, d.ExpiresAt, f.ExpiresAt)
	assert.Equal(t, bigOf(t, d.NativeFee), f.NativeFee)
	assert.Equal(t, bigOf(t, d.LinkFee), f.LinkFee)
	assert.Equal(t, bigOf(t, d.Price), f.Price)
	assert.Equal(t, bigOf(t, d.Bid), f.Bid)
	assert.Equal(t, bigOf(t, d.Ask), f.Ask)
	assert.Nil(t, f.ExchangeRate)
	assert.Nil(t, f.Mid)
}

// fixedOf converts a decoded integer back to the encoder's representation.
func fixedOf(t *testing.T, v *big.Int) fixed {
	t.Helper()
	require.True(t, v.BitLen() < 127, "value out of the encoder's range")
	m := new(big.Int).And(v, new(big.Int).SetUint64(^uint64(0)))
	h := new(big.Int).Rsh(v, 64)
	return fixed{hi: h.Int64(), lo: m.Uint64()}
}

// The encoder, given the parts of the real report, reproduces it byte for
// byte: same head, same offsets, same padding, same length.
func TestEncodeReproducesRealV3Report(t *testing.T) {
	_, b := loadReal(t)
	fr, err := DecodeFullReport(b)
	require.NoError(t, err)
	assert.Equal(t, b, fr.Encode())

	f, err := DecodeReportBlob(fr.ReportBlob)
	require.NoError(t, err)
	v := reportValues{schema: SchemaV3, id: f.FeedID, ts: int64(f.ObservationsTimestamp),
		nativeFee: f.NativeFee.Uint64(), linkFee: f.LinkFee.Uint64()}
	blob := make([]byte, 9*word)
	v.blob(blob)
	// The blob writer takes nano-units; write the real 18-decimal prices
	// directly over its price words.
	putInt(blob[6*word:], fixedOf(t, f.Price))
	putInt(blob[7*word:], fixedOf(t, f.Bid))
	putInt(blob[8*word:], fixedOf(t, f.Ask))
	// expiresAt is observation + 30 days in the real report too.
	assert.Equal(t, f.ObservationsTimestamp+expiry, f.ExpiresAt)
	assert.Equal(t, fr.ReportBlob, blob)
}

// A generated V3 report has the real report's layout.
func TestGeneratedV3LayoutMatchesReal(t *testing.T) {
	_, realBytes := loadReal(t)
	s := newTestSim(t, nil)
	id := findStream(t, s, Mainnet, "ETH/USD-RefPrice-DS-Premium-Global-003")
	r, ok := s.Report(Mainnet, id, t0.Unix())
	require.True(t, ok)
	b, err := hex.DecodeString(r.FullReport[2:])
	require.NoError(t, err)
	require.Len(t, b, len(realBytes))
	// The words that are layout, not content: offsets and lengths.
	for _, w := range []int{3, 4, 5, 7, 17, 20} {
		assert.Equal(t, realBytes[w*word:(w+1)*word], b[w*word:(w+1)*word], "word %d", w)
	}
	assert.Equal(t, realBytes[:2], b[:2], "config digest prefix")

	fr, err := DecodeFullReport(b)
	require.NoError(t, err)
	f, err := DecodeReportBlob(fr.ReportBlob)
	require.NoError(t, err)
	assert.Equal(t, uint32(t0.Unix()), f.ValidFromTimestamp)
	assert.Equal(t, f.ValidFromTimestamp, f.ObservationsTimestamp)
	assert.Equal(t, f.ObservationsTimestamp+uint32(30*24*time.Hour/time.Second), f.ExpiresAt)
	assert.Equal(t, id, "0x"+hex.EncodeToString(f.FeedID[:]))
}

func TestReportSizes(t *testing.T) {
	s := newTestSim(t, nil)
	// Words: the envelope's 7 and 7 more for the lengths and two
	// signatures, and the blob's (V14: 17 and its string's 2).
	want := map[string]int{"V1": 736, "V2": 672, "V3": 736, "V4": 704, "V5": 736, "V6": 800, "V7": 672,
		"V8": 736, "V9": 768, "V10": 864, "V11": 896, "V12": 768, "V13": 800, "V14": 1056}
	seen := map[string]bool{}
	for _, st := range s.Streams(Mainnet) {
		r, ok := s.Report(Mainnet, st.FeedID, t0.Unix())
		require.True(t, ok)
		assert.Len(t, r.FullReport, 2+2*want[st.SchemaVersion], st.Name)
		seen[st.SchemaVersion] = true
	}
	assert.Len(t, seen, 14)
}

func TestInt192TwosComplement(t *testing.T) {
	tests := []struct {
		name string
		nano int64
		want string // the 18-decimal value
	}{
		{"zero", 0, "0"},
		{"one nano-unit", 1, "1000000000"},
		{"minus one nano-unit", -1, "-1000000000"},
		{"price", 4204150104000, "4204150104000000000000"},
		{"negative price", -4204150104000, "-4204150104000000000000"},
		{"largest nano value", 1<<63 - 1, "9223372036854775807000000000"},
		{"smallest nano value", -1 << 63, "-9223372036854775808000000000"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := make([]byte, word)
			putInt(w, scaled(tc.nano))
			if tc.nano < 0 {
				for _, c := range w[:8] {
					require.Equal(t, byte(0xff), c, "sign extension")
				}
			}
			d := blobDecoder{b: w}
			got := d.int192()
			require.NoError(t, d.err)
			assert.Equal(t, tc.want, got.String())
		})
	}

	// Minus one nano-unit, word by word: all ones but the low bits.
	w := make([]byte, word)
	putInt(w, fixed{hi: -1, lo: ^uint64(0)})
	for _, c := range w {
		assert.Equal(t, byte(0xff), c)
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	_, b := loadReal(t)
	tests := []struct {
		name   string
		mutate func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-word] }},
		{"not whole words", func(b []byte) []byte { return b[:len(b)-1] }},
		{"blob offset past the end", func(b []byte) []byte { b[3*word+31] = 0xff; b[3*word+30] = 0x0f; return b }},
		{"blob offset misaligned", func(b []byte) []byte { b[3*word+31]++; return b }},
		{"blob length too long", func(b []byte) []byte { b[7*word+30] = 0x0f; return b }},
		{"rawRs count too large", func(b []byte) []byte { b[17*word+31] = 9; return b }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.mutate(append([]byte(nil), b...))
			_, err := DecodeFullReport(c)
			assert.ErrorIs(t, err, ErrMalformedReport)
		})
	}

	fr, err := DecodeFullReport(b)
	require.NoError(t, err)
	blob := append([]byte(nil), fr.ReportBlob...)
	blob[6*word] = 0x01 // price word beyond int192, not a sign extension
	_, err = DecodeReportBlob(blob)
	assert.ErrorIs(t, err, ErrMalformedReport)
	_, err = DecodeReportBlob(fr.ReportBlob[:8*word])
	assert.ErrorIs(t, err, ErrMalformedReport)
	unknown := append([]byte(nil), fr.ReportBlob...)
	unknown[1] = 0x05
	_, err = DecodeReportBlob(unknown)
	assert.ErrorIs(t, err, ErrMalformedReport)
}
