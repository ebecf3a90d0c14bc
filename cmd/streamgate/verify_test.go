package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/upstreamsim"
)

// donsYAML writes the mainnet DON configurations of the simulator whose
// schema is in schemas, as a dons_file.
func donsYAML(t *testing.T, schemas ...string) string {
	sim, err := upstreamsim.New(upstreamsim.Default())
	require.NoError(t, err)
	defer sim.Close()
	digests := map[string]string{}
	for _, s := range sim.Streams(upstreamsim.Mainnet) {
		r, _ := sim.Report(upstreamsim.Mainnet, s.FeedID, time.Now().Unix()-60)
		digests[s.SchemaVersion] = r.FullReport[2 : 2+64] // reportContext[0]
	}
	var b strings.Builder
	for _, c := range sim.DON(upstreamsim.Mainnet) {
		keep := false
		for _, s := range schemas {
			keep = keep || "0x"+digests[s] == c.ConfigDigest
		}
		if !keep {
			continue
		}
		signers, _ := json.Marshal(c.Signers)
		fmt.Fprintf(&b, "- config_digest: %q\n  f: %d\n  signers: %s\n", c.ConfigDigest, c.F, signers)
	}
	return b.String()
}

// TestSIGHUPReloadsTheDONConfiguration: the binary trusts the DON
// configurations of its dons_file; a report signed under a digest the file
// lacks is refused (502, unknown_digest, logged once) until the operator
// adds it and sends SIGHUP.
func TestSIGHUPReloadsTheDONConfiguration(t *testing.T) {
	cfg := testConfig{verify: "{mode: enforce, dons_file: dons.yaml}"}
	p := startFiles(t, cfg.String(), map[string]string{"dons.yaml": donsYAML(t, "V7", "V11")}, []string{"mainnet", "testnet"})
	base := p.net["mainnet"]
	demo := newSigner(config.DemoKeyID, config.DemoKeySecret)
	var eth string
	for _, f := range feedIDs(t, base, 1) {
		if strings.HasPrefix(f, "0x0003") {
			eth = f
			break
		}
	}
	require.NotEmpty(t, eth)
	ts := time.Now().Add(-time.Hour).Unix()

	for i := range 2 {
		code, body := mustGet(t, demo, base+"/api/v1/reports?feedID="+eth+"&timestamp="+strconv.FormatInt(ts-int64(i), 10))
		assert.Equal(t, http.StatusBadGateway, code, "%s", body)
		assert.Contains(t, string(body), "unknown_digest")
	}
	p.waitLog(5*time.Second, func(l logLine) bool {
		return strings.HasPrefix(l.str("msg"), "a report did not verify") && l.str("cause") == "unknown_digest"
	})

	mark := p.logMark()
	require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(p.cfgPath), "dons.yaml"), []byte(donsYAML(t, "V3", "V7", "V11")), 0o600))
	p.signal(syscall.SIGHUP)
	p.waitLogFrom(mark, 10*time.Second, func(l logLine) bool { return l.str("msg") == "configuration reloaded" })
	code, body := mustGet(t, demo, base+"/api/v1/reports?feedID="+eth+"&timestamp="+strconv.FormatInt(ts, 10))
	assert.Equal(t, http.StatusOK, code, "after the reload: %s", body)

	// The refusals were logged once for the cause, counted each.
	p.mu.Lock()
	logged := 0
	for _, line := range p.raw {
		if strings.Contains(line, "a report did not verify") {
			logged++
		}
	}
	p.mu.Unlock()
	assert.Equal(t, 1, logged, "one log line per cause")
	code, metrics := mustGet(t, nil, p.admin+"/metrics")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(metrics), `streamgate_report_verification_failures_total{cause="unknown_digest",entry="upstream",mode="enforce",network="mainnet"} 2`)

	p.signal(syscall.SIGTERM)
	assert.Equal(t, 0, p.wait(30*time.Second))
}
