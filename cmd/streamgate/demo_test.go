//go:build !nosimulator

package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server"
	"streamgate/upstreamsim"
)

// TestDemoBannerPrintsEveryTeamsKey starts the demo configuration on free
// loopback ports and checks that its banner shows the key and secret of
// every team of it, not only the first.
func TestDemoBannerPrintsEveryTeamsKey(t *testing.T) {
	cfg := config.Default()
	cfg.Server.AdminListen = "127.0.0.1:0"
	for _, n := range cfg.Networks {
		n.Listen = "127.0.0.1:0"
	}
	srv, err := server.New(cfg, server.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	var out bytes.Buffer
	printDemo(&out, srv, cfg)
	banner := out.String()
	require.GreaterOrEqual(t, len(cfg.Teams), 2, "the demo has two teams")
	for _, team := range cfg.Teams {
		assert.Contains(t, banner, `Team "`+team.Name+`"`)
		for _, k := range team.Keys {
			assert.Contains(t, banner, "export STREAMGATE_KEY="+k.ID)
			for _, s := range k.Secrets() {
				assert.Contains(t, banner, "export STREAMGATE_SECRET="+s.Reveal())
			}
		}
	}
	assert.Contains(t, banner, config.ResearchKeyID)
	assert.Contains(t, banner, `Team "research" (testnet only; 5 streams)`)
	assert.False(t, strings.Contains(banner, "defaults.go"))
	// A live stream of every schema, to read with get -decode.
	assert.Contains(t, banner, "go run ./cmd/streamgate get -decode -url http://")
	for _, sc := range upstreamsim.Schemas {
		assert.Regexp(t, `(?m)^  `+sc.String()+` +0x`+fmt.Sprintf("%04x", uint16(sc))+`[0-9a-f]{60}  \S+$`, banner, "a stream of %s", sc)
	}
}
