//go:build nosimulator

package server

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
)

// Built with -tags nosimulator (the container image's build, .ci/run),
// the server has no embedded upstream and New refuses the demo
// configuration, which asks for it, before it binds anything.
func TestNoSimulatorNew(t *testing.T) {
	require.False(t, EmbeddedUpstream)
	srv, err := New(config.Default(), Options{})
	require.Error(t, err)
	assert.Nil(t, srv)
	assert.True(t, errors.Is(err, errNoEmbedded), err.Error())
	assert.Contains(t, err.Error(), `networks.mainnet.upstream.url: "embedded"`)
}
