package upstreamsim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The DON configuration: four signers, f = 1, one configuration per
// schema, the same from any simulator of the default seed and another
// from another seed; served by GET /don of the control API.
func TestDONConfiguration(t *testing.T) {
	a, err := New(Config{})
	require.NoError(t, err)
	b, err := New(Config{})
	require.NoError(t, err)
	c, err := New(Config{DONSeed: "another"})
	require.NoError(t, err)
	for _, network := range []string{Mainnet, Testnet} {
		cs := a.DON(network)
		require.Len(t, cs, 14)
		assert.Equal(t, cs, b.DON(network), "deterministic from the seed")
		assert.NotEqual(t, cs[0].Signers, c.DON(network)[0].Signers, "another seed, other keys")
		for _, cfg := range cs {
			assert.Equal(t, DONF, cfg.F)
			assert.Len(t, cfg.Signers, DONSigners)
			assert.True(t, strings.HasPrefix(cfg.ConfigDigest, "0x0009"))
		}
	}
	assert.NotEqual(t, a.DON(Mainnet)[0].Signers, a.DON(Testnet)[0].Signers, "each network its own DON")

	ctl := httptest.NewServer(a.ControlHandler())
	defer ctl.Close()
	resp, err := http.Get(ctl.URL + "/don")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var got map[string][]DONConfig
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(t, a.DON(Mainnet), got[Mainnet])
	assert.Equal(t, a.DON(Testnet), got[Testnet])
	assert.Contains(t, a.DONYAML(), "# networks.mainnet.verify.dons\n- config_digest: \""+got[Mainnet][0].ConfigDigest+"\"")
}
