package compat

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"streamgate/don"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestSDKDecodedView fetches the decoded view of reports of every schema
// (V1 to V14) through a gateway, adds the four real testnet V3 reports as
// the don package decodes them, and has decoded.test.mjs compare each with
// the official SDK's decodeReport (V2 to V13; V1 and V14 it refuses).
func TestSDKDecodedView(t *testing.T) {
	node, npm := tools(t)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	install(ctx, t, npm)

	env := servertest.Start(t, servertest.Options{Quiet: true})
	c := servertest.Demo()
	perSchema := map[string]int{}
	var records []json.RawMessage
	start := time.Now().Add(-time.Hour).Unix()
	for _, s := range env.Sim.Streams(upstreamsim.Mainnet) {
		if s.Status != "live" || perSchema[s.SchemaVersion] >= 2 {
			continue
		}
		perSchema[s.SchemaVersion]++
		target := "/api/v1/reports/page?feedID=" + s.FeedID + "&startTimestamp=" + strconv.FormatInt(start, 10) + "&limit=3"
		req, err := c.Request(ctx, env.Mainnet, target)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", don.DecodedMediaType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s (%v)", target, resp.StatusCode, body, err)
		}
		var doc struct {
			Reports []json.RawMessage `json:"reports"`
		}
		if err := json.Unmarshal(body, &doc); err != nil || len(doc.Reports) == 0 {
			t.Fatalf("%s: %s (%v)", target, body, err)
		}
		records = append(records, doc.Reports...)
	}
	var schemas []string
	for _, s := range don.Schemas {
		if perSchema[s.String()] == 0 {
			t.Fatalf("no live %s stream on the simulator", s)
		}
		schemas = append(schemas, s.String())
	}

	// The real report: its record, decoded by the don package as the
	// gateway's view does.
	data, err := os.ReadFile(filepath.Join("..", "don", "testdata", "real-v3-report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var real struct {
		FeedID     string `json:"feedID"`
		FullReport string `json:"fullReport"`
		Decoded    struct {
			ValidFromTimestamp    int64 `json:"validFromTimestamp"`
			ObservationsTimestamp int64 `json:"observationsTimestamp"`
		} `json:"decoded"`
	}
	if err := json.Unmarshal(data, &real); err != nil {
		t.Fatal(err)
	}
	reals := []upstreamsim.Report{{FeedID: real.FeedID, ValidFromTimestamp: real.Decoded.ValidFromTimestamp,
		ObservationsTimestamp: real.Decoded.ObservationsTimestamp, FullReport: real.FullReport}}
	// And the three real testnet reports, their timestamps read from
	// their blobs.
	data, err = os.ReadFile(filepath.Join("..", "don", "testdata", "real-testnet-reports.json"))
	if err != nil {
		t.Fatal(err)
	}
	var testnet struct {
		Reports []upstreamsim.Report `json:"reports"`
	}
	if err := json.Unmarshal(data, &testnet); err != nil || len(testnet.Reports) != 3 {
		t.Fatalf("real testnet reports: %d (%v)", len(testnet.Reports), err)
	}
	for _, r := range testnet.Reports {
		env, err := don.DecodeEnvelope(hexBytes(t, r.FullReport))
		if err != nil {
			t.Fatal(err)
		}
		h, err := don.BlobHeader(env.ReportBlob)
		if err != nil {
			t.Fatal(err)
		}
		r.ValidFromTimestamp, r.ObservationsTimestamp = int64(h.ValidFromTimestamp), int64(h.ObservationsTimestamp)
		reals = append(reals, r)
	}
	for _, r := range reals {
		rec, _ := json.Marshal(r)
		view, err := don.AppendDecodedRecord(nil, rec, func(don.Record) don.Verification { return don.Verification{Mode: don.ModeOff} })
		if err != nil {
			t.Fatal(err)
		}
		records = append(records, view)
	}

	path := filepath.Join(t.TempDir(), "decoded.json")
	out, _ := json.Marshal(records)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records (%v streams per schema, and the four real V3 reports)", len(records), perSchema)
	if err := run(ctx, t, exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "decoded.test.mjs"),
		[]string{"COMPAT_DECODED=" + path, "COMPAT_SCHEMAS=" + strings.Join(schemas, ",")}); err != nil {
		t.Fatalf("node --test decoded.test.mjs: %v", err)
	}
}

func hexBytes(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.TrimPrefix(s, "0x"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
