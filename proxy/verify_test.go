package proxy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/don"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
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
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
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
	cases := map[upstreamsim.Forgery]don.Cause{
		upstreamsim.ForgeSignature:     don.CauseUnknownSigner,
		upstreamsim.ForgeOutsider:      don.CauseUnknownSigner,
		upstreamsim.ForgeTooFew:        don.CauseTooFewSigners,
		upstreamsim.ForgeTooMany:       don.CauseTooManySigners,
		upstreamsim.ForgeDuplicate:     don.CauseDuplicateSigner,
		upstreamsim.ForgeUnknownDigest: don.CauseUnknownDigest,
		upstreamsim.ForgeRelabel:       don.CauseRecordMismatch,
	}
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport} {
		t.Run(mode, func(t *testing.T) {
			env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(cfg *config.Config) {
				cfg.Networks["mainnet"].Verify.Mode = mode
			}})
			c := servertest.Demo()
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
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
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: forge}))
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
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
				calls := env.UpstreamCalls()
				for name, target := range targets {
					resp, body := c.Get(t, env.Mainnet, target)
					require.Equal(t, http.StatusOK, resp.StatusCode, "%s %s after: %s", forge, name, body)
					var doc struct {
						Report  *upstreamsim.Report  `json:"report"`
						Reports []upstreamsim.Report `json:"reports"`
					}
					require.NoError(t, json.Unmarshal(body, &doc))
					reports := doc.Reports
					if doc.Report != nil {
						reports = append(reports, *doc.Report)
					}
					require.NotEmpty(t, reports)
					for _, r := range reports {
						res, ok := env.Server.Gate("mainnet").Verify(don.Record(r))
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

// tamperedUpstream starts a gateway (verify mode mode) whose upstream's
// report and bulk answers are rewritten by tamper, given the simulator
// and the report records as the simulator answered them.
func tamperedUpstream(t *testing.T, mode string, tamper func(sim *upstreamsim.Simulator, reports []upstreamsim.Report)) *servertest.Env {
	var sim atomic.Pointer[upstreamsim.Simulator] // set once it is up, before any report request
	return withSim(&sim, servertest.Start(t, servertest.Options{Quiet: true,
		Config: func(cfg *config.Config) { cfg.Networks["mainnet"].Verify.Mode = mode },
		Upstream: func(network string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/api/v1/reports" && r.URL.Path != "/api/v1/reports/bulk" {
					h.ServeHTTP(w, r)
					return
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, r)
				var doc struct {
					Report  *upstreamsim.Report  `json:"report,omitempty"`
					Reports []upstreamsim.Report `json:"reports,omitempty"`
				}
				if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &doc) != nil {
					w.WriteHeader(rec.Code)
					w.Write(rec.Body.Bytes())
					return
				}
				if doc.Report != nil {
					one := []upstreamsim.Report{*doc.Report}
					tamper(sim.Load(), one)
					doc.Report = &one[0]
				}
				tamper(sim.Load(), doc.Reports)
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(doc)
			})
		}}))
}

func withSim(p *atomic.Pointer[upstreamsim.Simulator], env *servertest.Env) *servertest.Env {
	p.Store(env.Sim)
	return env
}

// A report whose record names another stream than its fullReport is
// refused as a record that is not its signed report's.
func TestVerifyRefusesAnotherStreamsReport(t *testing.T) {
	var btc string
	env := tamperedUpstream(t, config.VerifyEnforce, func(sim *upstreamsim.Simulator, reports []upstreamsim.Report) {
		for i, r := range reports {
			other, ok := sim.Report(upstreamsim.Mainnet, btc, r.ObservationsTimestamp)
			if !ok {
				panic("no report of the other stream")
			}
			reports[i].FullReport = other.FullReport
		}
	})
	c := servertest.Demo()
	btc = env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	resp, body := c.Get(t, env.Mainnet, "/api/v1/reports?feedID="+eth+"&timestamp="+strconv.FormatInt(pastTS(), 10))
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s", body)
	assert.True(t, strings.Contains(string(body), string(don.CauseRecordMismatch)), "%s", body)
	assert.Equal(t, 1.0, failures(t, env, don.EntryUpstream, don.CauseRecordMismatch, config.VerifyEnforce))
}

// A report at a timestamp is the report of that second, and a bulk's are
// of the second asked: the upstream answering with the genuine report of
// an hour before, unmodified, is refused in every mode (502, an integrity
// error, never an entry), and the right report is fetched once it
// answers right. Relabelled as the second asked, it is refused as
// record_mismatch (TestVerifyRefusesForgeries).
func TestVerifyRefusesAnotherSecondsReport(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport, config.VerifyOff} {
		t.Run(mode, func(t *testing.T) {
			var honest atomic.Bool
			env := tamperedUpstream(t, mode, func(sim *upstreamsim.Simulator, reports []upstreamsim.Report) {
				if honest.Load() {
					return
				}
				for i, r := range reports {
					old, ok := sim.Report(upstreamsim.Mainnet, r.FeedID, r.ObservationsTimestamp-upstreamsim.RelabelAge)
					if !ok {
						panic("no old report")
					}
					reports[i] = old
				}
			})
			c := servertest.Demo()
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
			ts := pastTS()
			targets := map[string]string{
				"reports": "/api/v1/reports?feedID=" + eth + "&timestamp=" + strconv.FormatInt(ts, 10),
				"bulk":    "/api/v1/reports/bulk?feedIDs=" + eth + "," + btc + "&timestamp=" + strconv.FormatInt(ts-1, 10),
			}
			for name, target := range targets {
				resp, body := c.Get(t, env.Mainnet, target)
				assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s: %s", name, body)
			}
			assert.Equal(t, 2.0, metricSum(t, env.Registry, "streamgate_upstream_integrity_failures_total"))
			honest.Store(true)
			for name, target := range targets {
				resp, body := c.Get(t, env.Mainnet, target)
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", name, body)
				var doc struct {
					Report  *upstreamsim.Report  `json:"report"`
					Reports []upstreamsim.Report `json:"reports"`
				}
				require.NoError(t, json.Unmarshal(body, &doc))
				if doc.Report != nil {
					doc.Reports = append(doc.Reports, *doc.Report)
				}
				require.NotEmpty(t, doc.Reports)
				for _, r := range doc.Reports {
					assert.Contains(t, []int64{ts, ts - 1}, r.ObservationsTimestamp, "%s: the report of the second asked", name)
				}
			}
		})
	}
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
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: upstreamsim.ForgeDuplicate}))
			resp, body := c.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+eth)
			if mode == config.VerifyEnforce {
				assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s", body)
				assert.Contains(t, string(body), string(don.CauseDuplicateSigner))
			} else {
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
				var doc struct{ Report upstreamsim.Report }
				require.NoError(t, json.Unmarshal(body, &doc))
				res, _ := env.Server.Gate("mainnet").Verify(don.Record(doc.Report))
				assert.Equal(t, don.CauseDuplicateSigner, res.Cause)
			}
			assert.GreaterOrEqual(t, failures(t, env, don.EntryUpstream, don.CauseDuplicateSigner, mode), 1.0)
		})
	}
}
