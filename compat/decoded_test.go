package compat

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"streamgate/don"
	"streamgate/server/servertest"
	"streamgate/simulator"
)

// TestSDKDecodedView fetches the decoded view of reports of every schema
// through a gateway, adds the real testnet V3 report as the don package
// decodes it, and has decoded.test.mjs compare each with the official
// SDK's decodeReport.
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
	for _, s := range env.Sim.Streams(simulator.Mainnet) {
		if s.Status != "live" || perSchema[s.SchemaVersion] >= 3 {
			continue
		}
		perSchema[s.SchemaVersion]++
		target := "/api/v1/reports/page?feedID=" + s.FeedID + "&startTimestamp=" + strconv.FormatInt(start, 10) + "&limit=4"
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
	for _, schema := range []string{"V3", "V7", "V11"} {
		if perSchema[schema] == 0 {
			t.Fatalf("no live %s stream on the simulator", schema)
		}
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
	rec, _ := json.Marshal(simulator.Report{FeedID: real.FeedID, ValidFromTimestamp: real.Decoded.ValidFromTimestamp,
		ObservationsTimestamp: real.Decoded.ObservationsTimestamp, FullReport: real.FullReport})
	view, err := don.AppendDecodedRecord(nil, rec, func(don.Record) don.Verification { return don.Verification{Mode: don.ModeOff} })
	if err != nil {
		t.Fatal(err)
	}
	records = append(records, view)

	path := filepath.Join(t.TempDir(), "decoded.json")
	out, _ := json.Marshal(records)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d records (%v per schema, and the real V3 report)", len(records), perSchema)
	if err := run(ctx, t, exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "decoded.test.mjs"), []string{"COMPAT_DECODED=" + path}); err != nil {
		t.Fatalf("node --test decoded.test.mjs: %v", err)
	}
}
