package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/don"
	"streamgate/server/servertest"
	"streamgate/simulator"
)

const (
	verifiedMetric = "streamgate_reports_verified_total"
	failedMetric   = "streamgate_report_verification_failures_total"
)

func failures(t testing.TB, env *servertest.Env, entry string, cause don.Cause, mode string) float64 {
	return metricValue(t, env.Registry, failedMetric, map[string]string{"network": "mainnet", "entry": entry, "cause": string(cause), "mode": mode})
}

// The demo (the simulator as a DON, mode enforce) verifies every report
// where it enters, over every REST endpoint, and refuses none.
func TestVerifiedDemo(t *testing.T) {
	env := servertest.Start(t, servertest.Options{})
	c := servertest.Demo()
	eth := env.FeedID(t, simulator.Mainnet, "ETH", "USD", "V3")
	btc := env.FeedID(t, simulator.Mainnet, "BTC", "USD", "V3")
	ts := strconv.FormatInt(pastTS(), 10)
	for _, target := range []string{
		"/api/v1/reports?feedID=" + eth + "&timestamp=" + ts,
		"/api/v1/reports/latest?feedID=" + eth,
		"/api/v1/reports/bulk?feedIDs=" + eth + "," + btc + "&timestamp=" + strconv.FormatInt(pastTS()-5, 10),
		"/api/v1/reports/page?feedID=" + btc + "&startTimestamp=" + ts + "&limit=3",
	} {
		resp, body := c.Get(t, env.Mainnet, target)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", target, body)
	}
	// 1 + 1 + 2 + 3 reports entered from the upstream, each verified.
	assert.GreaterOrEqual(t, metricValue(t, env.Registry, verifiedMetric, map[string]string{"network": "mainnet", "entry": don.EntryUpstream}), 7.0)
	assert.Zero(t, metricSum(t, env.Registry, failedMetric))
	assert.Equal(t, don.ModeEnforce, env.Server.Gate("mainnet").Mode())
}

// Each forgery of the simulator is refused over reports, bulk and pages in
// mode enforce (502 naming the cause, counted, never cached: the genuine
// report is fetched once the forgery stops) and served and counted in mode
// report.
func TestVerifyRefusesForgeries(t *testing.T) {
	cases := map[simulator.Forgery]don.Cause{
		simulator.ForgeSignature:     don.CauseUnknownSigner,
		simulator.ForgeOutsider:      don.CauseUnknownSigner,
		simulator.ForgeTooFew:        don.CauseTooFewSigners,
		simulator.ForgeTooMany:       don.CauseTooManySigners,
		simulator.ForgeDuplicate:     don.CauseDuplicateSigner,
		simulator.ForgeUnknownDigest: don.CauseUnknownDigest,
	}
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport} {
		t.Run(mode, func(t *testing.T) {
			env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(cfg *config.Config) {
				cfg.Networks["mainnet"].Verify.Mode = mode
			}})
			c := servertest.Demo()
			eth := env.FeedID(t, simulator.Mainnet, "ETH", "USD", "V3")
			btc := env.FeedID(t, simulator.Mainnet, "BTC", "USD", "V3")
			base := pastTS()
			i := int64(0)
			for forge, cause := range cases {
				i += 10
				ts := strconv.FormatInt(base-i, 10)
				targets := map[string]string{
					"reports": "/api/v1/reports?feedID=" + eth + "&timestamp=" + ts,
					"bulk":    "/api/v1/reports/bulk?feedIDs=" + eth + "," + btc + "&timestamp=" + strconv.FormatInt(base-i-1, 10),
					"page":    "/api/v1/reports/page?feedID=" + btc + "&startTimestamp=" + strconv.FormatInt(base-i-5, 10) + "&limit=3",
				}
				require.NoError(t, env.Sim.SetFaults(simulator.Faults{Forge: forge}))
				before := failures(t, env, don.EntryUpstream, cause, mode)
				for name, target := range targets {
					resp, body := c.Get(t, env.Mainnet, target)
					if mode == config.VerifyEnforce {
						assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s %s: %s", forge, name, body)
						assert.Contains(t, string(body), string(cause), "%s %s", forge, name)
						assert.Contains(t, string(body), "did not verify against the DON's signatures")
					} else {
						assert.Equal(t, http.StatusOK, resp.StatusCode, "%s %s: %s", forge, name, body)
					}
				}
				assert.GreaterOrEqual(t, failures(t, env, don.EntryUpstream, cause, mode)-before, 3.0, "%s: one count per answer at least", forge)

				// The forgery ends: enforce kept nothing, so the genuine
				// reports are fetched and served; report kept the forged
				// ones (served from the cache, as any hit).
				require.NoError(t, env.Sim.SetFaults(simulator.Faults{}))
				calls := env.UpstreamCalls()
				for name, target := range targets {
					resp, body := c.Get(t, env.Mainnet, target)
					require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s after: %s", forge, name, body)
					var doc struct {
						Report  *simulator.Report  `json:"report"`
						Reports []simulator.Report `json:"reports"`
					}
					require.NoError(t, json.Unmarshal(body, &doc))
					reports := doc.Reports
					if doc.Report != nil {
						reports = append(reports, *doc.Report)
					}
					require.NotEmpty(t, reports)
					for _, r := range reports {
						res, ok := env.Server.Gate("mainnet").Verify(r.FeedID, r.FullReport)
						require.True(t, ok)
						assert.Equal(t, mode == config.VerifyEnforce, res.OK(), "%s %s after: %+v", forge, name, res)
					}
				}
				if mode == config.VerifyEnforce {
					assert.Equal(t, int64(3), env.UpstreamCalls()-calls, "%s: each refused answer is fetched again", forge)
				} else {
					assert.Equal(t, int64(0), env.UpstreamCalls()-calls, "%s: the forged answers were cached", forge)
				}
			}
		})
	}
}

// A report whose record names another stream than its fullReport is
// refused as malformed.
func TestVerifyRefusesAnotherStreamsReport(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Upstream: func(network string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/api/v1/reports" {
				h.ServeHTTP(w, r)
				return
			}
			// Answer with the report of another stream under the asked feedID.
			rec := httptest.NewRecorder()
			q := r.URL.Query()
			other := r.Clone(r.Context())
			q.Set("feedID", "0x00030a1995a99b1efe9cb7a0ea3f78866e155320a6bd2d1bc7eee700db493822") // AAVE/USD
			other.URL.RawQuery = q.Encode()
			other.RequestURI = ""
			h.ServeHTTP(rec, r) // the asked report, for its shape
			var doc struct{ Report simulator.Report }
			_ = json.Unmarshal(rec.Body.Bytes(), &doc)
			rec2 := httptest.NewRecorder()
			h.ServeHTTP(rec2, other)
			var doc2 struct{ Report simulator.Report }
			_ = json.Unmarshal(rec2.Body.Bytes(), &doc2)
			doc.Report.FullReport = doc2.Report.FullReport
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(doc)
		})
	}})
	c := servertest.Demo()
	eth := env.FeedID(t, simulator.Mainnet, "ETH", "USD", "V3")
	resp, body := c.Get(t, env.Mainnet, "/api/v1/reports?feedID="+eth+"&timestamp="+strconv.FormatInt(pastTS(), 10))
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s", body)
	assert.True(t, strings.Contains(string(body), string(don.CauseMalformed)), "%s", body)
	assert.Equal(t, 1.0, failures(t, env, don.EntryUpstream, don.CauseMalformed, config.VerifyEnforce))
}

// latest: a forged upstream answer is refused in enforce (502 naming the
// cause, never an entry) and served in report.
func TestVerifyRefusesForgedLatest(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport} {
		t.Run(mode, func(t *testing.T) {
			env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(cfg *config.Config) {
				cfg.Networks["mainnet"].Verify.Mode = mode
				cfg.Realtime.LatestFromStream = false // the REST path; the stream has its own test
			}})
			c := servertest.Demo()
			eth := env.FeedID(t, simulator.Mainnet, "ETH", "USD", "V3")
			require.NoError(t, env.Sim.SetFaults(simulator.Faults{Forge: simulator.ForgeDuplicate}))
			resp, body := c.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+eth)
			if mode == config.VerifyEnforce {
				assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s", body)
				assert.Contains(t, string(body), string(don.CauseDuplicateSigner))
			} else {
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
				var doc struct{ Report simulator.Report }
				require.NoError(t, json.Unmarshal(body, &doc))
				res, _ := env.Server.Gate("mainnet").Verify(doc.Report.FeedID, doc.Report.FullReport)
				assert.Equal(t, don.CauseDuplicateSigner, res.Cause)
			}
			assert.GreaterOrEqual(t, failures(t, env, don.EntryUpstream, don.CauseDuplicateSigner, mode), 1.0)
		})
	}
}
