package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// subcommands are every command run dispatches; the help must name each.
var subcommands = []string{"serve", "check", "keygen", "get", "archive", "usage", "help"}

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
