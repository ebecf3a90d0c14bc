package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
)

// A build without the embedded upstream refuses every network that asks
// for it, by path; one with it, or a configuration with real upstreams,
// has nothing to refuse. CheckBuild answers for this build.
func TestCheckBuild(t *testing.T) {
	demo := config.Default() // both networks embedded
	assert.Equal(t, EmbeddedUpstream, CheckBuild(demo) == nil, "CheckBuild(demo): %v", CheckBuild(demo))
	assert.NoError(t, checkBuild(demo, true))

	err := checkBuild(demo, false)
	require.Error(t, err)
	assert.True(t, errors.Is(err, errNoEmbedded), err.Error())
	for _, name := range []string{"mainnet", "testnet"} {
		assert.Contains(t, err.Error(), "networks."+name+".upstream.url: \"embedded\": this build leaves out the embedded upstream")
	}

	real := config.Default()
	n := real.Networks["testnet"]
	n.Upstream.URL = "https://api.testnet-dataengine.chain.link"
	err = checkBuild(real, false)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "networks.mainnet.upstream.url")
	assert.False(t, strings.Contains(err.Error(), "networks.testnet"), err.Error())
	real.Networks["mainnet"].Upstream.URL = "https://api.dataengine.chain.link"
	assert.NoError(t, checkBuild(real, false))
}
