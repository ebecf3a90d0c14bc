package server_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/testing/pgtest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// archiveVerifications returns the testnet gate's counts of the reports
// read from the archive: verified, failed (every cause) and, of those,
// remembered (no signature recovered again).
func archiveVerifications(t *testing.T, env *servertest.Env) (verified, failed, remembered float64) {
	t.Helper()
	verified = servertest.MetricValue(t, env.Registry, "streamgate_reports_verified_total", map[string]string{"network": "testnet", "entry": "archive"})
	remembered = servertest.MetricValue(t, env.Registry, "streamgate_report_verifications_remembered_total", map[string]string{"network": "testnet", "entry": "archive"})
	mfs, err := env.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "streamgate_report_verification_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			entry := false
			for _, lp := range m.GetLabel() {
				entry = entry || lp.GetName() == "entry" && lp.GetValue() == "archive"
			}
			if entry {
				failed += m.GetCounter().GetValue()
			}
		}
	}
	return verified, failed, remembered
}

// TestArchiveReadsVerifyEachReportOnce: a report read from the archive
// is verified once under the rules in force, not at every read: reports a
// gateway verified as the upstream answered them are read back from the
// archive without a signature recovered again; on a gateway started
// afresh a page read from the archive verifies its reports, and another
// page over the same reports (not in any cache) verifies none again. A
// reload to a stricter rule (the DON's configuration replaced) forgets
// every result: the next read verifies again and refuses, and the
// upstream's answer is refused too.
func TestArchiveReadsVerifyEachReportOnce(t *testing.T) {
	sim := unlimitedSim(t)
	dir := t.TempDir()
	pebble := func(a *config.Archive) { a.Backend, a.Path = config.ArchiveBackendPebble, dir }
	env := archiveEnv(t, sim, &targets{}, pebble)
	feed := env.FeedID(t, upstreamsim.Testnet, "ETH", "USD", "V3") // a schema whose blob signs validFromTimestamp
	s := time.Now().Unix() - 300
	page := func(env *servertest.Env, start int64, limit int, want string) string {
		t.Helper()
		st, xc, body := get(t, env.Testnet, fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feed, start, limit))
		require.Equal(t, http.StatusOK, st, body)
		require.Equal(t, want, xc, "page from %d, limit %d", start, limit)
		return body
	}
	page(env, s, 30, "MISS") // the upstream's, verified and archived with its span
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	page(env, s+2, 10, "HIT")
	v, f, r := archiveVerifications(t, env)
	assert.Equal(t, []float64{10, 0, 10}, []float64{v, f, r},
		"verified, failed, remembered: the reports verified as the upstream answered them are not verified again")
	_ = env.Server.Close() // at once: its error says only that idle connections were cut

	env = archiveEnv(t, sim, &targets{}, pebble)
	sim.ResetCounters()
	page(env, s+1, 20, "HIT")
	v, f, r = archiveVerifications(t, env)
	assert.Equal(t, []float64{20, 0, 0}, []float64{v, f, r}, "a gateway started afresh verifies what it reads")
	page(env, s+2, 19, "HIT")
	v, f, r = archiveVerifications(t, env)
	assert.Equal(t, []float64{39, 0, 19}, []float64{v, f, r}, "the same reports read again: none verified again")
	assert.Equal(t, int64(0), reportCalls(sim))

	// A stricter rule: the DON's configuration replaced by another's.
	other, err := upstreamsim.New(upstreamsim.Config{DONSeed: "another"})
	require.NoError(t, err)
	t.Cleanup(func() { other.Close() })
	next := *env.Config
	next.Networks = maps.Clone(next.Networks)
	testnet := *next.Networks["testnet"]
	testnet.Verify.DONs = servertest.SimulatorDONs(other, upstreamsim.Testnet)
	next.Networks["testnet"] = &testnet
	_, err = env.Server.Reload(&next)
	require.NoError(t, err)
	st, xc, body := get(t, env.Testnet, fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feed, s+3, 18))
	assert.Equal(t, http.StatusBadGateway, st, "the archive's reports and the upstream's refused: %s %s", xc, body)
	v, f, r = archiveVerifications(t, env)
	assert.Equal(t, []float64{39, 1, 19}, []float64{v, f, r}, "the first report of the page verified again, and refused")
	assert.Equal(t, int64(1), reportCalls(sim), "the page asked upstream")
}

// TestArchiveTamperedRowRefused: a report read from PostgreSQL whose row
// was rewritten (a bit of its blob, or a time of its record) after the
// gateway verified and remembered the original is verified anew and
// refused; the request is answered with the upstream's bytes.
func TestArchiveTamperedRowRefused(t *testing.T) {
	pg := pgtest.New(t)
	sim := unlimitedSim(t)
	env := archiveEnv(t, sim, &targets{}, func(a *config.Archive) {
		postgresArchive(pg)(a)
		a.ReadTimeout = 30 * time.Second // a read slower than read_timeout goes upstream by design
	})
	waitArchiveOpen(t, env)
	feed := env.FeedID(t, upstreamsim.Testnet, "ETH", "USD", "V3") // a schema whose blob signs validFromTimestamp
	s := time.Now().Unix() - 300
	pageT := func(start int64, limit int) string {
		return fmt.Sprintf("/api/v1/reports/page?feedID=%s&startTimestamp=%d&limit=%d", feed, start, limit)
	}
	st, xc, _ := get(t, env.Testnet, pageT(s, 30))
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "MISS", xc)
	require.NoError(t, env.Server.FlushArchive(context.Background()))
	st, xc, _ = get(t, env.Testnet, pageT(s+1, 20))
	require.Equal(t, http.StatusOK, st)
	require.Equal(t, "HIT", xc)
	v, f, r := archiveVerifications(t, env)
	require.Equal(t, []float64{20, 0, 20}, []float64{v, f, r}, "every report of the page remembered")

	ctx := context.Background()
	c := pgConn(t, pg)
	defer c.Close(ctx)
	id, err := feedid.Parse(feed)
	require.NoError(t, err)
	sb := strings.TrimPrefix(string(id), "0x")
	// A bit of a signature's last word flipped in the row of s+5; the
	// validFromTimestamp of the row of s+8 moved a second.
	tag, err := c.Exec(ctx, `UPDATE archive_reports SET full_report = set_byte(full_report, length(full_report) - 40, get_byte(full_report, length(full_report) - 40) # 1)
WHERE network = 'testnet' AND stream = decode($1, 'hex') AND observations_ts = $2`, sb, s+5)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())
	tag, err = c.Exec(ctx, `UPDATE archive_reports SET valid_from_ts = valid_from_ts - 1
WHERE network = 'testnet' AND stream = decode($1, 'hex') AND observations_ts = $2`, sb, s+8)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected())

	sim.ResetCounters()
	for i, tg := range []string{pageT(s+6, 10), pageT(s+2, 20)} {
		st, xc, body := get(t, env.Testnet, tg)
		require.Equal(t, http.StatusOK, st, body)
		assert.Equal(t, "MISS", xc, "the tampered row is not served: %s", tg)
		assert.True(t, fleetUpstreamBody(t, env.UpTestnet, tg) == strings.TrimSuffix(body, "\n"), "the upstream's bytes: %s", tg)
		_, f, _ := archiveVerifications(t, env)
		assert.Equal(t, float64(i+1), f, "the tampered row verified anew and refused: %s", tg)
	}
	assert.Positive(t, reportCalls(sim), "asked upstream")
}
