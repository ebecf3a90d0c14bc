package cache

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const feed = "0x00037da06d56d083fe599397a4769a042d63aa73dc4ef57709d31e9971a5b439"

func TestKeys(t *testing.T) {
	cases := []struct {
		name string
		got  string
		want string
	}{
		{"report, shared credential", ReportKey("mainnet", "", "0xab", 1718885772),
			"report/7:mainnet/0:/4:0xab/1718885772"},
		{"report, team credential", ReportKey("testnet", "trading", "0xab", -1),
			"report/7:testnet/7:trading/4:0xab/-1"},
		{"latest", LatestKey("mainnet", "", "0xab"), "latest/7:mainnet/0:/4:0xab/"},
		{"page", PageKey("mainnet", "ops", "0xab", 1718885772, 100),
			"page/7:mainnet/3:ops/4:0xab/1718885772/100"},
		{"catalog", CatalogKey("mainnet", "", "hidden"), "catalog/7:mainnet/0:/6:hidden/"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.got)
		})
	}
}

// Names holding the separators, digits or colons must not let two requests
// share a key.
func TestKeysAreUnambiguous(t *testing.T) {
	keys := []string{
		ReportKey("mainnet", "", feed, 1),
		ReportKey("testnet", "", feed, 1),
		ReportKey("mainnet", "team", feed, 1),
		ReportKey("mainnet", "", feed, 11),
		ReportKey("", "mainnet", feed, 1),
		ReportKey("mainnet/0:", "", feed, 1),
		ReportKey("mainnet", "/0:", feed, 1),
		ReportKey("a", "b/1:c", "d", 1),
		ReportKey("a/1:b", "c", "d", 1),
		ReportKey("a", "b", "c/1", 1),
		LatestKey("mainnet", "", feed),
		LatestKey("mainnet", "", feed+"/1"),
		PageKey("mainnet", "", feed, 1, 1),
		PageKey("mainnet", "", feed, 11, 1),
		PageKey("mainnet", "", feed, 1, 11),
		CatalogKey("mainnet", "", "anonymous"),
		CatalogKey("mainnet", "", "authenticated"),
		CatalogKey("mainnet", "trading", "authenticated"),
		CatalogKey("testnet", "", "anonymous"),
	}
	seen := map[string]int{}
	for i, k := range keys {
		if j, dup := seen[k]; dup {
			t.Errorf("keys %d and %d are both %q", j, i, k)
		}
		seen[k] = i
	}
}

// kindOf returns the kind of a key made by this package's builders, or ""
// for any other string.
func kindOf(key string) string {
	i := strings.IndexByte(key, '/')
	if i < 0 {
		return ""
	}
	switch k := key[:i]; k {
	case kindReport, kindLatest, kindPage, kindCatalog, kindBulk:
		return k
	}
	return ""
}

func TestKeyKinds(t *testing.T) {
	assert.Equal(t, kindReport, kindOf(ReportKey("m", "", feed, 1)))
	assert.Equal(t, kindLatest, kindOf(LatestKey("m", "", feed)))
	assert.Equal(t, kindPage, kindOf(PageKey("m", "", feed, 1, 2)))
	assert.Equal(t, kindCatalog, kindOf(CatalogKey("m", "", "anonymous")))
	assert.Equal(t, kindBulk, kindOf(BulkKey("m", "", 1, []string{feed})))
	// A list of feeds cannot be confused with another split of the same bytes.
	assert.NotEqual(t, BulkKey("m", "", 1, []string{"ab", "c"}), BulkKey("m", "", 1, []string{"a", "bc"}))
	assert.NotEqual(t, BulkKey("m", "", 1, []string{feed}), BulkKey("m", "", 2, []string{feed}))
	assert.Equal(t, "", kindOf("other/1:x/"))
	assert.Equal(t, "", kindOf("report"))
}

func TestIntLen(t *testing.T) {
	for _, v := range []int64{0, 1, 9, 10, 99, 100, -1, -9, -10, 1718885772, math.MaxInt64, math.MinInt64} {
		assert.Equal(t, len(strconv.FormatInt(v, 10)), intLen(v), "%d", v)
	}
}

func TestKeysAllocateOnce(t *testing.T) {
	var sink string
	builders := map[string]func(){
		"report":  func() { sink = ReportKey("mainnet", "trading", feed, 1718885772) },
		"latest":  func() { sink = LatestKey("mainnet", "trading", feed) },
		"page":    func() { sink = PageKey("mainnet", "trading", feed, 1718885772, 100) },
		"catalog": func() { sink = CatalogKey("mainnet", "trading", "authenticated") },
	}
	for name, build := range builders {
		assert.Equal(t, 1.0, testing.AllocsPerRun(100, build), name)
	}
	_ = sink
}

// parseKey splits a key back into its string and integer fields, given how
// many string fields its kind has; it fails on anything the builders could
// not have made.
func parseKey(t testing.TB, key string, nStrings int) (string, []string, []int64) {
	t.Helper()
	kind, rest, ok := strings.Cut(key, "/")
	require.True(t, ok, "no kind in %q", key)
	var strs []string
	for range nStrings {
		n, after, ok := strings.Cut(rest, ":")
		require.True(t, ok, "no length in %q", rest)
		l, err := strconv.Atoi(n)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(after), l+1)
		strs = append(strs, after[:l])
		require.Equal(t, byte('/'), after[l])
		rest = after[l+1:]
	}
	var ints []int64
	if rest != "" {
		for _, f := range strings.Split(rest, "/") {
			v, err := strconv.ParseInt(f, 10, 64)
			require.NoError(t, err)
			ints = append(ints, v)
		}
	}
	return kind, strs, ints
}

// Every key parses back into exactly what built it, so two different
// requests can never share a key.
func FuzzKeysRoundTrip(f *testing.F) {
	f.Add("mainnet", "", feed, "anonymous", int64(1718885772), 100)
	f.Add("a/1:b", "c/", "0:/", "", int64(-1), -5)
	f.Add("", "", "", "/", int64(math.MinInt64), math.MaxInt)
	f.Fuzz(func(t *testing.T, network, scope, feedID, view string, ts int64, limit int) {
		kind, strs, ints := parseKey(t, ReportKey(network, scope, feedID, ts), 3)
		assert.Equal(t, kindReport, kind)
		assert.Equal(t, []string{network, scope, feedID}, strs)
		assert.Equal(t, []int64{ts}, ints)

		kind, strs, ints = parseKey(t, LatestKey(network, scope, feedID), 3)
		assert.Equal(t, kindLatest, kind)
		assert.Equal(t, []string{network, scope, feedID}, strs)
		assert.Empty(t, ints)

		kind, strs, ints = parseKey(t, PageKey(network, scope, feedID, ts, limit), 3)
		assert.Equal(t, kindPage, kind)
		assert.Equal(t, []string{network, scope, feedID}, strs)
		assert.Equal(t, []int64{ts, int64(limit)}, ints)

		kind, strs, ints = parseKey(t, CatalogKey(network, scope, view), 3)
		assert.Equal(t, kindCatalog, kind)
		assert.Equal(t, []string{network, scope, view}, strs)
		assert.Empty(t, ints)
	})
}

func BenchmarkKeys(b *testing.B) {
	var sink string
	b.Run("report", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = ReportKey("mainnet", "", feed, 1718885772)
		}
	})
	b.Run("latest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = LatestKey("mainnet", "", feed)
		}
	})
	b.Run("page", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = PageKey("mainnet", "", feed, 1718885772, 100)
		}
	})
	b.Run("catalog", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sink = CatalogKey("mainnet", "", "authenticated")
		}
	})
	_ = sink
}
