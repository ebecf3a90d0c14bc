package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/server"
)

// subcommands are every command run dispatches; the help must name each.
var subcommands = []string{"serve", "check", "keygen", "get", "help"}

// TestHelpListsEverySubcommand runs the binary with each way of asking for
// help: every one prints the usage with every subcommand, on stdout, and
// exits 0 (not serve's flags alone, as "Usage of serve:").
func TestHelpListsEverySubcommand(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}} {
		stdout, stderr, code := runTool(t, nil, args...)
		assert.Equal(t, 0, code, "%v: %s", args, stderr)
		assert.NotContains(t, stdout+stderr, "Usage of serve", args)
		for _, c := range subcommands {
			assert.Contains(t, stdout, "streamgate "+c, "%v lists %s", args, c)
		}
	}
	// serve -h prints the same list, then serve's own flags (exit 2, as
	// the flag package does for -h).
	_, stderr, code := runTool(t, nil, "serve", "-h")
	assert.Equal(t, 2, code)
	for _, c := range subcommands {
		assert.Contains(t, stderr, "streamgate "+c)
	}
	assert.Contains(t, stderr, "-watch")
}

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
}
