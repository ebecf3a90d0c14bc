package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv is a lookup function over a fixed map.
func fakeEnv(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestExpand(t *testing.T) {
	env := fakeEnv(map[string]string{
		"A":        "alpha",
		"_B2":      "beta",
		"EMPTY":    "",
		"DOLLAR":   "x$y",
		"MULTI":    "one\ntwo",
		"REF":      "${A}",
		"lower_ok": "low",
	})
	tests := []struct {
		name     string
		in       string
		want     string
		problems []string // Problem.Error() of each, in order
	}{
		{name: "plain text", in: "a: b\n", want: "a: b\n"},
		{name: "one reference", in: "k: ${A}\n", want: "k: alpha\n"},
		{name: "several on a line", in: "k: ${A}-${_B2}-${lower_ok}", want: "k: alpha-beta-low"},
		{name: "empty value expands to nothing", in: "k: '${EMPTY}'\n", want: "k: ''\n"},
		{name: "value with $ is not expanded again", in: "k: ${DOLLAR}", want: "k: x$y"},
		{name: "value that looks like a reference stays literal", in: "k: ${REF}", want: "k: ${A}"},
		{name: "$$ is a literal $", in: "k: a$$b", want: "k: a$b"},
		{name: "$${ escapes a reference", in: "k: $${A}", want: "k: ${A}"},
		{name: "lone $ is kept", in: "k: pa$word $ 5$", want: "k: pa$word $ 5$"},
		{name: "$NAME without braces is kept", in: "k: $A", want: "k: $A"},
		{name: "whole-line comment is not expanded", in: "  # k: ${UNSET} $$\nk: ${A}\n", want: "  # k: ${UNSET} $$\nk: alpha\n"},
		{name: "trailing comment is expanded", in: "k: v # ${A}\n", want: "k: v # alpha\n"},
		{name: "CRLF line ends are kept", in: "a: ${A}\r\nb: ${_B2}\r\n", want: "a: alpha\r\nb: beta\r\n"},
		{
			name:     "unset variable names it and its line",
			in:       "a: 1\nb: ${A}\nc: ${NOPE}\n",
			want:     "a: 1\nb: alpha\nc: \n",
			problems: []string{"line 3: environment variable NOPE is not set"},
		},
		{
			name: "every unset variable is reported",
			in:   "a: ${X1}\nb: ${X2} ${X3}\n",
			want: "a: \nb:  \n",
			problems: []string{
				"line 1: environment variable X1 is not set",
				"line 2: environment variable X2 is not set",
				"line 2: environment variable X3 is not set",
			},
		},
		{
			name:     "value with a line break",
			in:       "a: ${MULTI}\n",
			want:     "a: \n",
			problems: []string{"line 1: environment variable MULTI contains a line break"},
		},
		{
			name:     "shell default form is refused",
			in:       "a: ${A:-x}\n",
			want:     "a: ${A:-x}\n",
			problems: []string{"line 1: column 4: malformed variable reference: only ${NAME} is expanded; write $$ for a literal $"},
		},
		{
			name:     "unterminated reference",
			in:       "a: b\nc: x${A\n",
			want:     "a: b\nc: x${A\n",
			problems: []string{"line 2: column 5: malformed variable reference: only ${NAME} is expanded; write $$ for a literal $"},
		},
		{
			name:     "empty name",
			in:       "a: ${}",
			want:     "a: ${}",
			problems: []string{"line 1: column 4: malformed variable reference: only ${NAME} is expanded; write $$ for a literal $"},
		},
		{
			name:     "name starting with a digit",
			in:       "a: ${1A}",
			want:     "a: ${1A}",
			problems: []string{"line 1: column 4: malformed variable reference: only ${NAME} is expanded; write $$ for a literal $"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, problems := expand([]byte(tc.in), env)
			assert.Equal(t, tc.want, string(out))
			var got []string
			for _, p := range problems {
				got = append(got, p.Error())
			}
			assert.Equal(t, tc.problems, got)
		})
	}
}

func TestExpandReturnsValuesUsed(t *testing.T) {
	_, values, _ := expand([]byte("a: ${A}\nb: ${E}\n# ${C}\n"), fakeEnv(map[string]string{"A": "alpha", "E": "", "C": "gamma"}))
	assert.Equal(t, []string{"alpha"}, values)
}

func TestParseUnsetVariable(t *testing.T) {
	const file = `networks:
  mainnet:
    listen: ":8080"
    upstream:
      url: https://api.example.com
      api_key: ${API_KEY}
      api_secret: ${API_SECRET}
`
	_, err := Parse([]byte(file), fakeEnv(map[string]string{"API_KEY": "k"}))
	var ps Problems
	require.ErrorAs(t, err, &ps)
	// The resulting "api_secret: required" on the same line is left out:
	// it would only repeat the cause.
	assert.Equal(t, Problems{{Line: 7, Msg: "environment variable API_SECRET is not set"}}, ps)

	cfg, err := Parse([]byte(file), fakeEnv(map[string]string{"API_KEY": "k", "API_SECRET": "s"}))
	require.NoError(t, err)
	assert.Equal(t, "k", cfg.Network("mainnet").Upstream.APIKey)
	assert.Equal(t, "s", cfg.Network("mainnet").Upstream.Secret().Reveal())
}

func TestParseNilLookupUsesProcessEnvironment(t *testing.T) {
	t.Setenv("STREAMGATE_TEST_LISTEN", "127.0.0.1:18080")
	cfg, err := Parse([]byte("networks: {mainnet: {listen: \"${STREAMGATE_TEST_LISTEN}\"}}\n"), nil)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:18080", cfg.Network("mainnet").Listen)
}

func TestParseCommentedOutReferenceIsIgnored(t *testing.T) {
	cfg, err := Parse([]byte("networks:\n  mainnet:\n    listen: \":8080\"\n    # upstream: {url: ${NOT_SET}}\n"), fakeEnv(nil))
	require.NoError(t, err)
	assert.True(t, cfg.Network("mainnet").Upstream.Embedded())
}
