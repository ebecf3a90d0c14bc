package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/config"
	"streamgate/don"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// canonTargets are the REST answers of ETH's (and BTC's) reports around
// ts: one report, latest, a bulk of one stream and a page of one report.
func canonTargets(eth, btc string, ts int64) map[string]string {
	return map[string]string{
		"reports": "/api/v1/reports?feedID=" + eth + "&timestamp=" + strconv.FormatInt(ts, 10),
		"latest":  "/api/v1/reports/latest?feedID=" + eth,
		"bulk":    "/api/v1/reports/bulk?feedIDs=" + btc + "&timestamp=" + strconv.FormatInt(ts-1, 10),
		"page":    "/api/v1/reports/page?feedID=" + btc + "&startTimestamp=" + strconv.FormatInt(ts-5, 10) + "&limit=1",
	}
}

// canonEnv starts a gateway in mode mode whose latest answers come from
// REST (the stream has its own test), its logs observed.
func canonEnv(t *testing.T, mode string) (*servertest.Env, *observer.ObservedLogs) {
	core, logs := observer.New(zap.WarnLevel)
	env := servertest.Start(t, servertest.Options{Logger: zap.New(core), Config: func(cfg *config.Config) {
		cfg.Networks["mainnet"].Verify.Mode = mode
		cfg.Realtime.LatestFromStream = false
		// The oversize answers (40 MiB, made by the simulator on a busy
		// machine, under the race detector) take their time: the test
		// waits for them, whatever the default bounds.
		cfg.Networks["mainnet"].Upstream.Timeout = 2 * time.Minute
		cfg.Networks["mainnet"].Upstream.Retries = 0
		cfg.Cache.LatestMaxWait = 2 * time.Minute
	}})
	return env, logs
}

// refusalLogs counts the log lines that name cause.
func refusalLogs(logs *observer.ObservedLogs, cause don.Cause) int {
	return logs.FilterField(zap.String("cause", string(cause))).Len()
}

// A record with a second "feedID", another stream's, before or after its
// own (the genuine report otherwise: every signature verifies), is refused
// over every REST endpoint in every mode, off included: 502 naming
// duplicate_key, counted at entry upstream, logged once, never cached (the
// genuine reports are fetched once the upstream answers right, each with
// one feedID). Before, the one with the decoy first verified, was cached
// immutable and served: a client whose parser keeps the first key read
// the other stream.
func TestVerifyRefusesDuplicateKey(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport, config.VerifyOff} {
		for _, forge := range []upstreamsim.Forgery{upstreamsim.ForgeDuplicateKey, upstreamsim.ForgeDuplicateKeyLast} {
			t.Run(mode+"/"+string(forge), func(t *testing.T) {
				env, logs := canonEnv(t, mode)
				c := servertest.Demo()
				eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
				btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
				targets := canonTargets(eth, btc, pastTS())
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: forge}))
				for name, target := range targets {
					resp, body := c.Get(t, env.Mainnet, target)
					assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s: %s", name, body)
					assert.Contains(t, string(body), string(don.CauseDuplicateKey), name)
				}
				assert.Equal(t, float64(len(targets)), failures(t, env, don.EntryUpstream, don.CauseDuplicateKey, mode), "one count per answer")
				assert.Equal(t, 1, refusalLogs(logs, don.CauseDuplicateKey), "logged once per cause and entry")

				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
				calls := env.UpstreamCalls()
				for name, target := range targets {
					resp, body := c.Get(t, env.Mainnet, target)
					require.Equal(t, http.StatusOK, resp.StatusCode, "%s after: %s", name, body)
					assert.Equal(t, 1, bytes.Count(body, []byte(`"feedID"`)), "%s after: %s", name, body)
				}
				assert.Equal(t, int64(len(targets)), env.UpstreamCalls()-calls, "nothing refused was cached")
			})
		}
	}
}

// A fullReport with a word of zeros appended (the genuine report
// otherwise) is not the canonical encoding of its envelope: refused as
// trailing_bytes in mode enforce (502, counted, never cached), served and
// counted in mode report, unchecked in mode off. Before, it verified.
func TestVerifyRefusesTrailingBytes(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport, config.VerifyOff} {
		t.Run(mode, func(t *testing.T) {
			env, logs := canonEnv(t, mode)
			c := servertest.Demo()
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
			targets := canonTargets(eth, btc, pastTS())
			require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: upstreamsim.ForgeTrailing}))
			for name, target := range targets {
				resp, body := c.Get(t, env.Mainnet, target)
				if mode == config.VerifyEnforce {
					assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s: %s", name, body)
					assert.Contains(t, string(body), string(don.CauseTrailingBytes), name)
				} else {
					assert.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", name, body)
				}
			}
			want := float64(len(targets))
			if mode == config.VerifyOff {
				want = 0
			} else {
				assert.Equal(t, 1, refusalLogs(logs, don.CauseTrailingBytes), "logged once per cause and entry")
			}
			assert.Equal(t, want, failures(t, env, don.EntryUpstream, don.CauseTrailingBytes, mode))
			if mode == config.VerifyEnforce {
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
				calls := env.UpstreamCalls()
				for name, target := range targets {
					resp, body := c.Get(t, env.Mainnet, target)
					require.Equal(t, http.StatusOK, resp.StatusCode, "%s after: %s", name, body)
				}
				assert.Equal(t, int64(len(targets)), env.UpstreamCalls()-calls, "nothing refused was cached")
			}
		})
	}
}

// waitMetric waits (bounded by ctx) until cond holds, and reports whether
// it did.
func waitMetric(ctx context.Context, cond func() bool) bool {
	for ctx.Err() == nil {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return false
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A fullReport with 20 MiB of zeros appended (an answer of about 40 MiB)
// is refused as oversize over every REST endpoint in every mode, before
// its JSON is parsed: 502, counted, never cached, and the gateway keeps
// none of it (its live heap after the answers is within a few MiB of
// before; it held the 40 MiB answer in the cache, and as many again for
// the decoded view, before).
func TestVerifyRefusesOversize(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport, config.VerifyOff} {
		t.Run(mode, func(t *testing.T) {
			env, logs := canonEnv(t, mode)
			c := servertest.Demo()
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
			targets := canonTargets(eth, btc, pastTS())
			if mode != config.VerifyEnforce {
				// Each answer is 40 MiB to make: one endpoint is enough
				// to show the refusal does not depend on the mode.
				targets = map[string]string{"reports": targets["reports"]}
			}
			require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: upstreamsim.ForgeOversize}))
			before := heapInUse()
			for name, target := range targets {
				resp, body := c.Get(t, env.Mainnet, target)
				assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "%s: %.200s", name, body)
				assert.Contains(t, string(body), string(don.CauseOversize), name)
			}
			// The decoded view of the report asked first: nothing held
			// to decode, the same refusal.
			req, err := c.Request(t.Context(), env.Mainnet, targets["reports"])
			require.NoError(t, err)
			req.Header.Set("Accept", don.DecodedMediaType)
			resp, err := c.HTTP.Do(req)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			assert.Equal(t, http.StatusBadGateway, resp.StatusCode, "decoded: %.200s", body)
			after := heapInUse()
			t.Logf("live heap before the answers %.1f MiB, after %.1f MiB", float64(before)/(1<<20), float64(after)/(1<<20))
			assert.Less(t, int64(after)-int64(before), int64(8<<20), "the refused reports are not held")
			assert.Equal(t, float64(len(targets)+1), failures(t, env, don.EntryUpstream, don.CauseOversize, mode))
			assert.Equal(t, 1, refusalLogs(logs, don.CauseOversize), "logged once per cause and entry")

			require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
			calls := env.UpstreamCalls()
			for name, target := range targets {
				resp, body := c.Get(t, env.Mainnet, target)
				require.Equal(t, http.StatusOK, resp.StatusCode, "%s after: %s", name, body)
			}
			assert.Equal(t, int64(len(targets)), env.UpstreamCalls()-calls, "nothing refused was cached")
		})
	}
}

// The stream applies the same reading: a frame whose record repeats
// "feedID" (another stream's, before or after its own) is dropped in every
// mode and counted as duplicate_key at entry stream; a frame whose
// fullReport has trailing bytes is dropped in enforce and delivered in
// report, counted as trailing_bytes. Every frame a client gets names its
// stream once. Before, the decoy after the record's own verified and was
// delivered (the check and the hub read the first "feedID", Go's decoder
// the last); the decoy before was refused only as record_mismatch, and
// served in mode report.
func TestVerifyStreamCanonical(t *testing.T) {
	for _, mode := range []string{config.VerifyEnforce, config.VerifyReport, config.VerifyOff} {
		t.Run(mode, func(t *testing.T) {
			env := servertest.Start(t, servertest.Options{Quiet: true,
				Sim:    func(c *upstreamsim.Config) { c.WSTick = 20 * time.Millisecond },
				Config: func(cfg *config.Config) { cfg.Networks["mainnet"].Verify.Mode = mode }})
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			eth := env.FeedID(t, upstreamsim.Mainnet, "ETH", "USD", "V3")
			conn, _, err := servertest.Demo().DialWS(ctx, env.Mainnet, "/api/v1/ws?feedIDs="+eth, "")
			require.NoError(t, err)
			defer conn.CloseNow()
			read := func() []byte {
				typ, data, err := conn.Read(ctx)
				require.NoError(t, err)
				require.Equal(t, websocket.MessageBinary, typ)
				return data
			}
			read()

			cases := []struct {
				forge     upstreamsim.Forgery
				cause     don.Cause
				delivered bool // in this mode
			}{
				{upstreamsim.ForgeDuplicateKeyLast, don.CauseDuplicateKey, false},
				{upstreamsim.ForgeDuplicateKey, don.CauseDuplicateKey, false},
				{upstreamsim.ForgeTrailing, don.CauseTrailingBytes, mode == config.VerifyReport || mode == config.VerifyOff},
			}
			for _, fc := range cases {
				received := metricSum(t, env.Registry, "streamgate_ws_frames_received_total")
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{Forge: fc.forge}))
				switch {
				case fc.cause == don.CauseTrailingBytes && mode == config.VerifyOff:
					// Unchecked: a forged frame reaches the client.
					for !strings.HasSuffix(string(read()), strings.Repeat("00", 32)+`"}}`) {
					}
				case fc.forge == upstreamsim.ForgeDuplicateKey:
					// Filed under the first "feedID", the other stream's,
					// which nobody asked for: dropped unchecked, as any
					// frame of a stream not wanted. Wait for a few.
					require.True(t, waitMetric(ctx, func() bool {
						return metricSum(t, env.Registry, "streamgate_ws_frames_received_total") >= received+5
					}), "frames received while the forgery is set")
				default:
					before := failures(t, env, don.EntryStream, fc.cause, mode)
					require.True(t, waitFailures(t, ctx, env, don.EntryStream, fc.cause, mode, before+1), "%s: forged frames counted", fc.forge)
				}
				require.NoError(t, env.Sim.SetFaults(upstreamsim.Faults{}))
				// The frames read until a genuine one: forged ones only
				// where the mode delivers them, each naming its stream
				// once.
				for {
					f := read()
					require.Equal(t, 1, bytes.Count(f, []byte(`"feedID"`)), "%s: %s", fc.forge, f)
					var fr servertest.Frame
					require.NoError(t, json.Unmarshal(f, &fr), "%s: %s", fc.forge, f)
					res, _ := env.Server.Gate("mainnet").Verify(don.Record(fr.Report))
					if mode == config.VerifyOff || res.OK() {
						break
					}
					require.True(t, fc.delivered, "%s: a forged frame delivered: %+v", fc.forge, res)
					assert.Equal(t, fc.cause, res.Cause)
				}
			}
		})
	}
}
