package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// starSecret is a key secret starting with "*", written unquoted: YAML
// reads it as an alias, and the parser's error quotes the anchor's name.
const starSecret = "*Zq8s3cretValue0123456789"

// TestYAMLErrorRedactsASecret: a file whose secret is an unknown YAML
// anchor is refused by check and by a reload, and the secret is in none
// of check's output, the log, the status page and /status.json.
func TestYAMLErrorRedactsASecret(t *testing.T) {
	cfg := testConfig{extra: fmt.Sprintf("  - name: star\n    networks: [mainnet]\n    feeds: [\"*\"]\n    keys: [{id: star-key, secret: %s}]\n", starSecret)}
	leak := starSecret[1:9]

	stdout, stderr, code := runTool(t, nil, "check", "-config", writeFile(t, "star.yaml", cfg.String()))
	assert.Equal(t, 1, code, stderr)
	assert.Contains(t, stderr, "anchor")
	assert.NotContains(t, stdout+stderr, leak, "check prints the secret")

	p := start(t, testConfig{}.String(), []string{"mainnet", "testnet"})
	mark := p.logMark()
	p.writeConfig(cfg.String())
	p.signal(syscall.SIGHUP)
	refused, _ := p.waitLogFrom(mark, 10*time.Second, func(l logLine) bool {
		return strings.HasPrefix(l.str("msg"), "reload refused")
	})
	assert.Contains(t, refused.str("error"), "anchor")
	p.mu.Lock()
	for _, line := range p.raw {
		assert.NotContains(t, line, leak, "a log line holds the secret")
	}
	p.mu.Unlock()
	for _, path := range []string{"/", "/status.json"} {
		var body []byte
		require.Eventually(t, func() bool {
			code, b := mustGet(t, nil, p.admin+path)
			body = b
			return code == 200 && strings.Contains(string(b), "anchor")
		}, 30*time.Second, 100*time.Millisecond, "%s shows the refused reload", path)
		assert.NotContains(t, string(body), leak, "%s holds the secret", path)
	}
	p.signal(syscall.SIGTERM)
	assert.Equal(t, 0, p.wait(30*time.Second))
}
