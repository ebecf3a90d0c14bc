package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/cache"
	"streamgate/config"
	"streamgate/don"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// waitFailures waits (bounded) until the refusals of cause at entry reach
// n, and reports whether they did.
func waitFailures(t *testing.T, ctx context.Context, env *servertest.Env, entry string, cause don.Cause, mode string, n float64) bool {
	for ctx.Err() == nil {
		if failures(t, env, entry, cause, mode) >= n {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// The stream: in enforce, each forgery's frames are dropped (counted at
// entry stream, by cause) and every frame a client gets verifies, the
// stream going on with the genuine reports; in report they are delivered
// and counted.
func TestVerifyStream(t *testing.T) {
	forgeries := []struct {
		forge upstreamsim.Forgery
		cause don.Cause
	}{
		{upstreamsim.ForgeSignature, don.CauseUnknownSigner},
		{upstreamsim.ForgeOutsider, don.CauseUnknownSigner},
		{upstreamsim.ForgeTooFew, don.CauseTooFewSigners},
		{upstreamsim.ForgeTooMany, don.CauseTooManySigners},
		{upstreamsim.ForgeDuplicate, don.CauseDuplicateSigner},
		{upstreamsim.ForgeUnknownDigest, don.CauseUnknownDigest},
		{upstreamsim.ForgeRelabel, don.CauseRecordMismatch},
	}
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport} {
		t.Run(mode, func(t *testing.T) {
			env := servertest.Start(t, servertest.Options{Quiet: true,
				Sim: func(c *upstreamsim.Config) { c.WSTick = 20 * time.Millisecond },
				Config: func(cfg *config.Config) {
					cfg.Networks["mainnet"].Verify.Mode = mode
				}})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			conn, _, err := servertest.Demo().DialWS(ctx, env.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
			require.NoError(t, err)
			defer conn.CloseNow()
			gate := env.Server.Gate("mainnet")
			check := func(f servertest.Frame) don.Result {
				res, ok := gate.Verify(don.Record(f.Report))
				require.True(t, ok)
				return res
			}
			last := servertest.ReadFrames(t, ctx, conn, 1)[0]
			require.True(t, check(last).OK(), "the genuine stream verifies")

			for _, fc := range forgeries {
				before := failures(t, env, don.EntryStream, fc.cause, mode)
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: fc.forge}))
				require.True(t, waitFailures(t, ctx, env, don.EntryStream, fc.cause, mode, before+1), "%s: forged frames counted", fc.forge)
				if mode == config.VerifyEnforce {
					require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
					// The forged frames were dropped: the next frame the
					// client gets is genuine, and newer.
					f := servertest.ReadFrames(t, ctx, conn, 1)[0]
					assert.True(t, check(f).OK(), "%s: frame at %d verifies", fc.forge, f.Report.ObservationsTimestamp)
					assert.Greater(t, f.Report.ObservationsTimestamp, last.Report.ObservationsTimestamp)
					last = f
					continue
				}
				// Report: the forged frames reach the client, served with
				// the cause they were counted with.
				for {
					f := servertest.ReadFrames(t, ctx, conn, 1)[0]
					if check(f).Cause == fc.cause {
						break
					}
				}
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
			}
		})
	}
}

// The shared tier: a forged entry written straight into the cache Redis
// (a valid encoding, a report of the right stream, signatures that do not
// verify) is refused in enforce, counted at entry shared, and the genuine
// report fetched; in report it is served and counted.
func TestVerifySharedTier(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport} {
		t.Run(mode, func(t *testing.T) {
			srv := redistest.New(t)
			env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(cfg *config.Config) {
				sharedTier(srv)(cfg)
				cfg.Networks["mainnet"].Verify.Mode = mode
			}})
			c := servertest.Demo()
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
			ts := pastTS()
			now := time.Now()

			forged := func(forge upstreamsim.Forgery, feed string, at int64) upstreamsim.Report {
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: forge}))
				defer env.Sim.SetFaults(upstreamsim.Faults{})
				r, ok := env.Sim.Report(upstreamsim.Mainnet, feed, at)
				require.True(t, ok)
				return r
			}
			reportBody := func(r upstreamsim.Report) []byte {
				b, err := json.Marshal(map[string]any{"report": r})
				require.NoError(t, err)
				return append(b, '\n')
			}
			pageBody := func(rs ...upstreamsim.Report) []byte {
				b, err := json.Marshal(map[string]any{"reports": rs})
				require.NoError(t, err)
				return b
			}

			cases := []struct {
				name, target string
				cause        don.Cause
				plant        func()
			}{
				{"report, duplicate signer", "/api/v1/reports?feedID=" + eth + "&timestamp=" + strconv.FormatInt(ts, 10), don.CauseDuplicateSigner, func() {
					plant(t, srv, cache.ReportKey(upstreamsim.Mainnet, "", eth, ts),
						&cache.Entry{Status: 200, Body: reportBody(forged(upstreamsim.ForgeDuplicate, eth, ts)), Stored: now})
				}},
				{"page, corrupted signature", "/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + strconv.FormatInt(ts-100, 10) + "&limit=2", don.CauseUnknownSigner, func() {
					plant(t, srv, cache.PageKey(upstreamsim.Mainnet, "", eth, ts-100, 2),
						&cache.Entry{Status: 200, Body: pageBody(forged(upstreamsim.ForgeSignature, eth, ts-100), forged(upstreamsim.ForgeSignature, eth, ts-99)), Stored: now})
				}},
				{"bulk, unknown digest", "/api/v1/reports/bulk?feedIDs=" + eth + "," + btc + "&timestamp=" + strconv.FormatInt(ts-200, 10), don.CauseUnknownDigest, func() {
					for _, f := range []string{eth, btc} {
						plant(t, srv, cache.ReportKey(upstreamsim.Mainnet, "", f, ts-200),
							&cache.Entry{Status: 200, Body: reportBody(forged(upstreamsim.ForgeUnknownDigest, f, ts-200)), Stored: now})
					}
				}},
				{"report, genuine but an hour old, relabelled", "/api/v1/reports?feedID=" + eth + "&timestamp=" + strconv.FormatInt(ts-400, 10), don.CauseRecordMismatch, func() {
					plant(t, srv, cache.ReportKey(upstreamsim.Mainnet, "", eth, ts-400),
						&cache.Entry{Status: 200, Body: reportBody(forged(upstreamsim.ForgeRelabel, eth, ts-400)), Stored: now})
				}},
				{"report, too few signers", "/api/v1/reports?feedID=" + btc + "&timestamp=" + strconv.FormatInt(ts-300, 10), don.CauseTooFewSigners, func() {
					plant(t, srv, cache.ReportKey(upstreamsim.Mainnet, "", btc, ts-300),
						&cache.Entry{Status: 200, Body: reportBody(forged(upstreamsim.ForgeTooFew, btc, ts-300)), Stored: now})
				}},
				// latest last: the demand it records may have the refresher call
				// the upstream in the background, which the other cases count.
				{"latest, signer outside the set", "/api/v1/reports/latest?feedID=" + btc, don.CauseUnknownSigner, func() {
					plant(t, srv, cache.LatestKey(upstreamsim.Mainnet, "", btc),
						&cache.Entry{Status: 200, Body: reportBody(forged(upstreamsim.ForgeOutsider, btc, now.Unix()-1)), Stored: now, Expires: now.Add(time.Minute)})
				}},
			}
			for _, tc := range cases {
				tc.plant()
				before := failures(t, env, don.EntryShared, tc.cause, mode)
				calls := env.UpstreamCalls()
				resp, body := c.Get(t, env.Mainnet, tc.target)
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", tc.name, body)
				assert.GreaterOrEqual(t, failures(t, env, don.EntryShared, tc.cause, mode)-before, 1.0, tc.name)
				var doc struct {
					Report  *upstreamsim.Report  `json:"report"`
					Reports []upstreamsim.Report `json:"reports"`
				}
				require.NoError(t, json.Unmarshal(body, &doc))
				if doc.Report != nil {
					doc.Reports = append(doc.Reports, *doc.Report)
				}
				require.NotEmpty(t, doc.Reports, tc.name)
				for _, r := range doc.Reports {
					res, _ := env.Server.Gate("mainnet").Verify(don.Record(r))
					assert.Equal(t, mode == config.VerifyEnforce, res.OK(), "%s: served %+v", tc.name, res)
				}
				if mode == config.VerifyEnforce {
					assert.Greater(t, env.UpstreamCalls(), calls, "%s: the genuine report came from the upstream", tc.name)
				} else if !strings.Contains(tc.target, "/latest") { // latest: the forged report served says so
					assert.Equal(t, calls, env.UpstreamCalls(), "%s: served from the shared tier", tc.name)
				}
			}
		})
	}
}
