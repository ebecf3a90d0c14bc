package config

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    Size
		wantErr string
	}{
		{in: "0", want: 0},
		{in: "1048576", want: MiB},
		{in: "17B", want: 17},
		{in: "64MiB", want: 64 << 20},
		{in: "1GiB", want: 1 << 30},
		{in: "2TiB", want: 2 << 40},
		{in: "3KiB", want: 3072},
		{in: "512KB", want: 512_000},
		{in: "512kB", want: 512_000},
		{in: "5MB", want: 5_000_000},
		{in: "7GB", want: 7_000_000_000},
		{in: "1TB", want: 1_000_000_000_000},
		{in: "256 MiB", want: 256 << 20},
		{in: "8388607TiB", want: 8388607 << 40},
		{in: "", wantErr: "want a non-negative integer"},
		{in: "MiB", wantErr: "want a non-negative integer"},
		{in: "-1MiB", wantErr: "want a non-negative integer"},
		{in: "+1MiB", wantErr: "want a non-negative integer"},
		{in: "1.5GiB", wantErr: "want a non-negative integer"},
		{in: "1e9", wantErr: "want a non-negative integer"},
		{in: "0x10", wantErr: "want a non-negative integer"},
		{in: "1 ", wantErr: "want a non-negative integer"},
		{in: " 1", wantErr: "want a non-negative integer"},
		{in: "1  MiB", wantErr: "want a non-negative integer"},
		{in: "1mib", wantErr: `unknown unit "mib"`},
		{in: "1Mb", wantErr: `unknown unit "Mb"`},
		{in: "1XB", wantErr: `unknown unit "XB"`},
		{in: "8388608TiB", wantErr: "too large"},
		{in: "99999999999999999999", wantErr: "too large"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSize(tc.in)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSizeString(t *testing.T) {
	tests := []struct {
		in   Size
		want string
	}{
		{0, "0"},
		{1, "1B"},
		{1023, "1023B"},
		{KiB, "1KiB"},
		{1000, "1KB"},
		{256 * MiB, "256MiB"},
		{1536 * MiB, "1536MiB"},
		{512_000, "500KiB"},
		{512_001, "512001B"},
		{3 * TB, "3TB"},
		{math.MaxInt64, "9223372036854775807B"},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.in.String())
		})
	}
}

func TestSizeYAML(t *testing.T) {
	var v struct {
		A, B, C Size
	}
	require.NoError(t, yaml.Unmarshal([]byte("a: 64MiB\nb: 1000\nc: '2 GB'\n"), &v))
	assert.Equal(t, 64*MiB, v.A)
	assert.Equal(t, Size(1000), v.B)
	assert.Equal(t, 2*GB, v.C)

	out, err := yaml.Marshal(v)
	require.NoError(t, err)
	assert.Equal(t, "a: 64MiB\nb: 1KB\nc: 2GB\n", string(out))

	for _, bad := range []string{"a: [1]\n", "a: 1.5\n", "a: lots\n"} {
		err := yaml.Unmarshal([]byte(bad), &v)
		var te *yaml.TypeError
		require.ErrorAs(t, err, &te, bad)
		assert.Contains(t, te.Errors[0], "line 1:", bad)
	}
}

// FuzzParseSize checks that ParseSize never panics, accepts only
// non-negative sizes, and that String gives back the same size.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1", "64MiB", "512 KB", "1kB", "9223372036854775807", "8388607TiB", "-1", "1.5GiB", "MiB", "1 ", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, n)
		}
		back, err := ParseSize(n.String())
		if err != nil {
			t.Fatalf("ParseSize(%q) of %q: %v", n.String(), s, err)
		}
		if back != n {
			t.Fatalf("ParseSize(%q) = %d, ParseSize(String()) = %d", s, n, back)
		}
	})
}
