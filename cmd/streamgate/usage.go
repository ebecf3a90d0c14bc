package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	ledger "streamgate/usage"
)

// usageMaxBody bounds the /usage.json answer read: 401 days of a large
// organisation's rows fit well within it.
const usageMaxBody = 64 << 20

// usageCmd prints the usage ledger of a gateway (its admin listener's
// /usage.json) as a table or as CSV, one line per day, network and team.
// The admin token, when the admin listener has one, comes from
// STREAMGATE_ADMIN_TOKEN.
func usageCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", envOr("STREAMGATE_ADMIN", ""), "the admin listener's URL, e.g. http://127.0.0.1:9090 (env STREAMGATE_ADMIN)")
	from := fs.String("from", "", "first UTC day, YYYY-MM-DD (default: today, or -to)")
	to := fs.String("to", "", "last UTC day, YYYY-MM-DD (default: today, or -from when it is later)")
	team := fs.String("team", "", "one team's rows only")
	format := fs.String("format", "table", "table or csv")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout")
	caFile := fs.String("cacert", os.Getenv("STREAMGATE_CACERT"), "PEM CA certificates to trust for an https:// admin listener (env STREAMGATE_CACERT)")
	certFile := fs.String("cert", os.Getenv("STREAMGATE_CERT"), "PEM client certificate, for an admin listener that asks for one (env STREAMGATE_CERT)")
	keyFile := fs.String("certkey", os.Getenv("STREAMGATE_CERTKEY"), "the client certificate's PEM private key (env STREAMGATE_CERTKEY)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: streamgate usage -admin URL [-from YYYY-MM-DD] [-to YYYY-MM-DD] [-team NAME] [-format table|csv]")
		fmt.Fprintln(stderr, "       the admin token, if any, from STREAMGATE_ADMIN_TOKEN")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageError{code: 2}
	}
	if fs.NArg() > 0 || *admin == "" || (*format != "table" && *format != "csv") {
		fs.Usage()
		return usageError{code: 2}
	}
	for _, d := range []struct{ name, v string }{{"-from", *from}, {"-to", *to}} {
		if d.v != "" {
			if _, err := ledger.ParseDay(d.v); err != nil {
				fmt.Fprintf(stderr, "streamgate usage: %s: %v\n", d.name, err)
				return usageError{code: 2}
			}
		}
	}
	q := url.Values{}
	for k, v := range map[string]string{"from": *from, "to": *to, "team": *team} {
		if v != "" {
			q.Set(k, v)
		}
	}
	target := strings.TrimRight(*admin, "/") + "/usage.json"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := adminRequest(ctx, http.MethodGet, target)
	if err != nil {
		return err
	}
	client, err := getClient(*caFile, *certFile, *keyFile)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, usageMaxBody))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return adminError(resp.StatusCode, body)
	}
	var ans struct {
		From, To string
		Shared   bool
		Rows     []ledger.Row
	}
	if err := json.Unmarshal(body, &ans); err != nil {
		return fmt.Errorf("the answer is not the ledger's: %w", err)
	}
	if *format == "csv" {
		return writeUsageCSV(stdout, ans.Rows)
	}
	return writeUsageTable(stdout, ans.From, ans.To, ans.Shared, ans.Rows)
}

// usageColumns are the columns of both formats, after day, network and
// team.
var usageColumns = []string{"requests", "ok", "4xx", "429", "5xx", "reports", "frames", "upstream_calls", "rest_bytes", "stream_bytes", "bytes"}

// usageValues returns a row's values in usageColumns' order.
func usageValues(r ledger.Row) []int64 {
	classes := map[string]int64{}
	for _, byClass := range r.ByEndpoint {
		for c, n := range byClass {
			classes[c] += n
		}
	}
	return []int64{r.Requests, classes[ledger.Class2xx] + classes[ledger.Class1xx] + classes[ledger.Class3xx],
		classes[ledger.Class4xx], classes[ledger.Class429], classes[ledger.Class5xx],
		r.Reports, r.Frames, r.UpstreamCalls, r.RESTBytes, r.StreamBytes, r.Bytes}
}

// teamLabel shows the requests of no team.
func teamLabel(team string) string {
	if team == "" {
		return "(none)"
	}
	return team
}

// writeUsageTable writes the rows aligned, the requests' classes summed
// over the endpoints (ok: 1xx, 2xx and 3xx), then the requests
// by endpoint of each row.
func writeUsageTable(w io.Writer, from, to string, shared bool, rows []ledger.Row) error {
	scope := "this replica alone (no Redis: in memory, lost at restart)"
	if shared {
		scope = "every replica (Redis)"
	}
	fmt.Fprintf(w, "usage %s to %s, %s\n\n", from, to, scope)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "day\tnetwork\tteam\t", strings.Join(usageColumns, "\t"), "\t\n")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t", r.Day, r.Network, teamLabel(r.Team))
		for _, v := range usageValues(r) {
			fmt.Fprintf(tw, "%d\t", v)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "(no usage recorded)")
		return err
	}
	fmt.Fprintln(w, "\nrequests by endpoint and class:")
	for _, r := range rows {
		eps := make([]string, 0, len(r.ByEndpoint))
		for ep := range r.ByEndpoint {
			eps = append(eps, ep)
		}
		sort.Strings(eps)
		var parts []string
		for _, ep := range eps {
			classes := make([]string, 0, len(r.ByEndpoint[ep]))
			for c := range r.ByEndpoint[ep] {
				classes = append(classes, c)
			}
			sort.Strings(classes)
			for _, c := range classes {
				parts = append(parts, fmt.Sprintf("%s %s=%d", ep, c, r.ByEndpoint[ep][c]))
			}
		}
		fmt.Fprintf(w, "  %s %s %s: %s\n", r.Day, r.Network, teamLabel(r.Team), strings.Join(parts, ", "))
	}
	return nil
}

// writeUsageCSV writes one record per row, the header first, then the
// requests by endpoint and class as columns "req_ENDPOINT_CLASS" (the
// same set of columns for every row).
func writeUsageCSV(w io.Writer, rows []ledger.Row) error {
	set := map[string]bool{}
	for _, r := range rows {
		for ep, byClass := range r.ByEndpoint {
			for c := range byClass {
				set[ep+"_"+c] = true
			}
		}
	}
	extra := make([]string, 0, len(set))
	for k := range set {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	cw := csv.NewWriter(w)
	header := append([]string{"day", "network", "team"}, usageColumns...)
	for _, k := range extra {
		header = append(header, "req_"+k)
	}
	cw.Write(header)
	for _, r := range rows {
		rec := []string{r.Day, r.Network, r.Team}
		for _, v := range usageValues(r) {
			rec = append(rec, strconv.FormatInt(v, 10))
		}
		for _, k := range extra {
			ep, c, _ := strings.Cut(k, "_")
			rec = append(rec, strconv.FormatInt(r.ByEndpoint[ep][c], 10))
		}
		cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}
