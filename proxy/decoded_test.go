package proxy_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/config"
	"streamgate/don"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// decodedRecord is a record of the decoded view.
type decodedRecord struct {
	FeedID                string            `json:"feedID"`
	ValidFromTimestamp    int64             `json:"validFromTimestamp"`
	ObservationsTimestamp int64             `json:"observationsTimestamp"`
	FullReport            string            `json:"fullReport"`
	Decoded               map[string]string `json:"decoded"`
	Decimal               map[string]string `json:"decimal"`
	Verification          struct {
		Mode         string `json:"mode"`
		Verified     bool   `json:"verified"`
		Signers      int    `json:"signers"`
		ConfigDigest string `json:"configDigest"`
		Cause        string `json:"cause"`
	} `json:"verification"`
}

// getDecoded sends a signed GET asking for the decoded view.
func getDecoded(t *testing.T, c *servertest.Client, base, target string) (*http.Response, []byte) {
	t.Helper()
	req, err := c.Request(context.Background(), base, target)
	require.NoError(t, err)
	req.Header.Set("Accept", don.DecodedMediaType)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func decimal18(v *big.Int) string { return string(don.AppendDecimal(nil, v, 18)) }

// checkDecoded compares a decoded record with the simulator's own decoder
// (upstreamsim/abi.go, independent of the gateway's) of its fullReport.
func checkDecoded(t *testing.T, r decodedRecord) {
	t.Helper()
	raw, err := hex.DecodeString(strings.TrimPrefix(r.FullReport, "0x"))
	require.NoError(t, err)
	full, err := upstreamsim.DecodeFullReport(raw)
	require.NoError(t, err)
	f, err := upstreamsim.DecodeReportBlob(full.ReportBlob)
	require.NoError(t, err)
	want := map[string]string{"schema": f.Schema.String()}
	wantDec := map[string]string{}
	for _, nv := range f.Named {
		want[nv.Name] = nv.Value
		if nv.Wide {
			wantDec[nv.Name] = decimal18(nv.Int)
		}
		switch nv.Name {
		case "marketStatus":
			want["marketStatusName"] = don.MarketStatusName(don.Schema(f.Schema), uint32(nv.Int.Uint64()))
		case "ripcord":
			want["ripcordName"] = don.RipcordName(uint32(nv.Int.Uint64()))
		}
	}
	assert.Equal(t, want, r.Decoded, "decoded fields of %s", f.Schema)
	assert.Equal(t, wantDec, r.Decimal, "decimal fields of %s", f.Schema)
	assert.True(t, r.Verification.Verified, "%+v", r.Verification)
	assert.Equal(t, upstreamsim.DONF+1, r.Verification.Signers)
	assert.Equal(t, "0x"+hex.EncodeToString(full.ReportContext[0][:]), r.Verification.ConfigDigest)
	assert.Equal(t, "enforce", r.Verification.Mode)
}

// The decoded view over every REST endpoint and every schema: every field
// of the schema, the decimals, the verification, beside the untouched
// record; made from the same cache entries as the raw answer (no second
// upstream call), which stays byte for byte what it was.
func TestDecodedView(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true})
	c := servertest.Demo()
	feeds := map[string]string{
		"V3":  env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3"),
		"V7":  "",
		"V11": "",
	}
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if feeds[s.SchemaVersion] == "" && s.Status == "live" {
			feeds[s.SchemaVersion] = s.FeedID
		}
	}
	ts := pastTS()
	type call struct{ feed, target string }
	var calls []call
	for schema, feed := range feeds {
		require.NotEmpty(t, feed, schema)
		calls = append(calls,
			call{feed, "/api/v1/reports?feedID=" + feed + "&timestamp=" + strconv.FormatInt(ts, 10)},
			call{feed, "/api/v1/reports/bulk?feedIDs=" + feed + "&timestamp=" + strconv.FormatInt(ts-10, 10)},
			call{feed, "/api/v1/reports/page?feedID=" + feed + "&startTimestamp=" + strconv.FormatInt(ts-100, 10) + "&limit=3"})
	}
	// latest last: its refreshes, which run in the background, would be
	// counted among the other endpoints' upstream calls.
	for _, feed := range feeds {
		calls = append(calls, call{feed, "/api/v1/reports/latest?feedID=" + feed})
	}
	{
		for _, cl := range calls {
			feed, target := cl.feed, cl.target
			resp, raw := c.Get(t, env.Mainnet, target)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", target, raw)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			calls := env.UpstreamCalls()
			resp, body := getDecoded(t, c, env.Mainnet, target)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", target, body)
			if !strings.Contains(target, "/latest") { // latest may be refreshed meanwhile
				assert.Equal(t, calls, env.UpstreamCalls(), "%s: the decoded view comes from the same entry", target)
			}
			assert.Equal(t, don.DecodedMediaType, resp.Header.Get("Content-Type"))

			var rawDoc struct {
				Report  json.RawMessage   `json:"report"`
				Reports []json.RawMessage `json:"reports"`
			}
			require.NoError(t, json.Unmarshal(raw, &rawDoc))
			var doc struct {
				Report  *decodedRecord  `json:"report"`
				Reports []decodedRecord `json:"reports"`
			}
			require.NoError(t, json.Unmarshal(body, &doc), "%s", body)
			recs := doc.Reports
			if doc.Report != nil {
				recs = append(recs, *doc.Report)
			}
			require.NotEmpty(t, recs, target)
			for _, r := range recs {
				checkDecoded(t, r)
				assert.Equal(t, feed, r.FeedID)
			}
			if !strings.Contains(target, "/latest") {
				// The record's own members are the raw answer's, untouched.
				rawRecs := rawDoc.Reports
				if rawDoc.Report != nil {
					rawRecs = append(rawRecs, rawDoc.Report)
				}
				require.Len(t, recs, len(rawRecs))
				for i, rr := range rawRecs {
					var sr upstreamsim.Report
					require.NoError(t, json.Unmarshal(rr, &sr))
					assert.Equal(t, sr.FullReport, recs[i].FullReport)
					assert.Equal(t, sr.ObservationsTimestamp, recs[i].ObservationsTimestamp)
					assert.True(t, strings.HasPrefix(string(body), `{"report":`+strings.TrimSuffix(string(rr), "}")) ||
						strings.Contains(string(body), strings.TrimSuffix(string(rr), "}")+`,"decoded":`), "record bytes kept: %s", rr)
				}
			}
		}
	}

	// Entitlements as for the raw answer: the research team may not read
	// mainnet.
	resp, body := getDecoded(t, servertest.Research(), env.Mainnet, "/api/v1/reports/latest?feedID="+feeds["V3"])
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", body)
}

// In mode report, a forged report is served in the decoded view with the
// cause of its refusal.
func TestDecodedViewStatesRefusal(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(cfg *config.Config) {
		cfg.Networks["mainnet"].Verify.Mode = config.VerifyReport
	}})
	c := servertest.Demo()
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: upstreamsim.ForgeOutsider}))
	resp, body := getDecoded(t, c, env.Mainnet, "/api/v1/reports?feedID="+eth+"&timestamp="+strconv.FormatInt(pastTS(), 10))
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	var doc struct{ Report decodedRecord }
	require.NoError(t, json.Unmarshal(body, &doc))
	assert.False(t, doc.Report.Verification.Verified)
	assert.Equal(t, string(don.CauseUnknownSigner), doc.Report.Verification.Cause)
	assert.Equal(t, "report", doc.Report.Verification.Mode)
	assert.NotEmpty(t, doc.Report.Decoded["price"])
}

// The stream's decoded view: opted in at the upgrade (Accept), one text
// frame per report, decoded and verified, on a stream of every schema.
func TestDecodedStream(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true, Sim: func(c *upstreamsim.Config) { c.WSTick = 20 * time.Millisecond }})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	ids := []string{eth}
	schemaOf := map[string]string{eth: "V3"}
	have := map[string]bool{"V3": true}
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if s.Status == "live" && !have[s.SchemaVersion] {
			ids = append(ids, s.FeedID)
			schemaOf[s.FeedID], have[s.SchemaVersion] = s.SchemaVersion, true
		}
	}
	require.Len(t, ids, len(upstreamsim.Schemas), "a live stream of every schema")
	c := servertest.Demo()
	target := "/api/v1/ws?feedIDs=" + strings.Join(ids, ",")
	req, err := http.NewRequest(http.MethodGet, env.Mainnet+target, nil)
	require.NoError(t, err)
	auth.Sign(req, c.Key, []byte(c.Secret), time.Now())
	h := http.Header{}
	for _, name := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature} {
		h.Set(name, req.Header.Get(name))
	}
	h.Set("Accept", don.DecodedMediaType)
	conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(env.Mainnet, "http")+target, &websocket.DialOptions{HTTPHeader: h})
	require.NoError(t, err)
	defer conn.CloseNow()
	seen := map[string]int{}
	for len(seen) < len(ids) {
		typ, data, err := conn.Read(ctx)
		require.NoError(t, err, "frames of %v", seen)
		assert.Equal(t, websocket.MessageText, typ)
		var doc struct{ Report decodedRecord }
		require.NoError(t, json.Unmarshal(data, &doc), "%s", data)
		checkDecoded(t, doc.Report)
		assert.Equal(t, schemaOf[doc.Report.FeedID], doc.Report.Decoded["schema"])
		seen[doc.Report.FeedID]++
	}
	// Without the opt-in, the upstream's binary frames.
	raw, _, err := c.DialWS(ctx, env.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
	require.NoError(t, err)
	defer raw.CloseNow()
	f := servertest.ReadFrames(t, ctx, raw, 1)[0]
	assert.Equal(t, eth, f.Report.FeedID)
}

// The decoded view of a cached entry is made once and kept beside it in
// the cache, counted against its bytes: the next decoded hit is that
// view, and a reload (new verification rules) makes new ones.
func TestDecodedViewKept(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Quiet: true})
	c := servertest.Demo()
	eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
	start := pastTS() - 200
	target := "/api/v1/reports/page?feedID=" + eth + "&startTimestamp=" + strconv.FormatInt(start, 10) + "&limit=5"
	resp, raw := c.Get(t, env.Mainnet, target)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", raw)
	env.Cache.Wait()
	key := cache.PageKey(upstreamsim.Mainnet, "", eth, start, 5)
	e, st := env.Cache.Get(key)
	require.Equal(t, cache.Fresh, st)
	gate := env.Server.Gate("mainnet")
	dk := cache.DecodedKey(key, gate.Epoch(), e.Stored.UnixNano(), len(e.Body))
	_, st = env.Cache.Get(dk)
	require.Equal(t, cache.Missing, st, "no decoded view before one is asked for")

	before := env.Cache.Bytes()
	resp, body := getDecoded(t, c, env.Mainnet, target)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	env.Cache.Wait()
	d, st := env.Cache.Get(dk)
	require.Equal(t, cache.Fresh, st, "the decoded view is kept")
	assert.Equal(t, string(body), string(d.Body))
	assert.GreaterOrEqual(t, env.Cache.Bytes()-before, int64(len(body)), "and counted against the cache's bytes")
	resp, again := getDecoded(t, c, env.Mainnet, target)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, string(body), string(again))

	gate.Set(gate.Mode(), nil) // a reload: off, new rules
	assert.NotEqual(t, dk, cache.DecodedKey(key, gate.Epoch(), e.Stored.UnixNano(), len(e.Body)))
	resp, off := getDecoded(t, c, env.Mainnet, target)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(off), `"verification":{"mode":"off"`, "made anew under the rules in force")
}
