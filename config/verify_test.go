package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const simDigest = "0x0009a1d8af7897c22afab90b56e0e023f2f6f1bc9b663babf2cb75842986b96c"

var simSigners = `["0x665d5B9f4313cDACF206Cb26485F1d47Ab353c04", "0xf84Ad761a1376Db42B33b07C5258320f024E442d",
          "0x8d923F21155310003f441Ff6daCD9F16883f3C74", "0x015dAaBc62010520C0Cdef3b35bb62c843D4cB72"]`

func remoteNetwork(verify string) string {
	return `networks:
  mainnet:
    listen: ":8080"
    upstream: {url: "https://api.example", api_key: k, api_secret: s3cret-s3cret-s3cret}
` + verify
}

func TestVerifyModeDefaults(t *testing.T) {
	// Embedded: enforce, the simulator's DON.
	cfg, err := Parse([]byte(minimal), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, VerifyEnforce, cfg.Networks["mainnet"].VerifyMode())
	assert.Equal(t, VerifyEnforce, Default().Networks["testnet"].VerifyMode())
	// A remote upstream with nothing configured: off.
	cfg, err = Parse([]byte(remoteNetwork("")), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, VerifyOff, cfg.Networks["mainnet"].VerifyMode())
	// With DONs: enforce, and the verifier knows them.
	cfg, err = Parse([]byte(remoteNetwork(`    verify:
      dons: [{config_digest: "`+simDigest+`", f: 1, signers: `+simSigners+`}]
`)), fakeEnv(nil))
	require.NoError(t, err)
	n := cfg.Networks["mainnet"]
	assert.Equal(t, VerifyEnforce, n.VerifyMode())
	v, err := n.Verify.Verifier()
	require.NoError(t, err)
	assert.Equal(t, 1, v.Len())
}

func TestVerifyProblems(t *testing.T) {
	for name, tc := range map[string]struct{ verify, want string }{
		"unknown mode":          {"    verify: {mode: strict}\n", `networks.mainnet.verify.mode: "strict" is not one of enforce, report, off`},
		"enforce without a DON": {"    verify: {mode: enforce}\n", "enforce needs the DON configurations to trust"},
		"report without a DON":  {"    verify: {mode: report}\n", "report needs the DON configurations to trust"},
		"bad digest":            {`    verify: {dons: [{config_digest: "0x12", f: 1, signers: ` + simSigners + `}]}` + "\n", "networks.mainnet.verify.dons[0].config_digest"},
		"bad address":           {`    verify: {dons: [{config_digest: "` + simDigest + `", f: 0, signers: ["0x665d"]}]}` + "\n", "networks.mainnet.verify.dons[0].signers[0]"},
		"bad checksum":          {`    verify: {dons: [{config_digest: "` + simDigest + `", f: 0, signers: ["0x665d5B9f4313cDACF206Cb26485F1d47Ab353C04"]}]}` + "\n", "EIP-55"},
		"f too large":           {`    verify: {dons: [{config_digest: "` + simDigest + `", f: 4, signers: ` + simSigners + `}]}` + "\n", "4 signers cannot make more than f = 4 signatures"},
		"duplicate digest":      {`    verify: {dons: [{config_digest: "` + simDigest + `", f: 1, signers: ` + simSigners + `}, {config_digest: "` + simDigest + `", f: 1, signers: ` + simSigners + `}]}` + "\n", "given twice"},
		"missing dons_file":     {"    verify: {dons_file: /nonexistent/dons.yaml}\n", "networks.mainnet.verify.dons_file"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(remoteNetwork(tc.verify)), fakeEnv(nil))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// dons_file is read at every load, relative to the configuration file.
func TestVerifyDONsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "streamgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(remoteNetwork("    verify: {dons_file: dons.yaml}\n")), 0o600))
	dons := filepath.Join(dir, "dons.yaml")
	require.NoError(t, os.WriteFile(dons, []byte(`- config_digest: "`+simDigest+`"
  f: 1
  signers: `+simSigners+"\n"), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	v, err := cfg.Networks["mainnet"].Verify.Verifier()
	require.NoError(t, err)
	assert.Equal(t, 1, v.Len())
	assert.Equal(t, VerifyEnforce, cfg.Networks["mainnet"].VerifyMode())

	// An update with a problem is refused with its path.
	require.NoError(t, os.WriteFile(dons, []byte("- config_digest: nope\n  f: 1\n  signers: []\n"), 0o600))
	_, err = Load(path)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "verify.dons_file[0].config_digest"), err.Error())
	// An unknown field is refused, not ignored.
	require.NoError(t, os.WriteFile(dons, []byte("- config_digest: \""+simDigest+"\"\n  fault: 1\n"), 0o600))
	_, err = Load(path)
	require.Error(t, err)
}
