package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"streamgate/archive"
)

const archiveUsage = `usage: streamgate archive COMMAND [flags]

  fill    -network N -feed ID -from T [-to T] [-wait]
          fetch a stream's history for a span into the archive, page by page
          within the upstream budget's fill share; resumed after a restart
  fills   list every fill job and its progress
  export  -network N -feed ID -from T [-to T] [-format jsonl|csv] [-o FILE]
          write a span of a stream as JSON lines (each report with its
          decoded view) or CSV (its times and decoded fields)

T is unix seconds or an RFC 3339 time; -to defaults to now. Every command
calls the admin listener given by -admin (env STREAMGATE_ADMIN), with the
admin token of env STREAMGATE_ADMIN_TOKEN when the listener asks for one.
`

// archiveCmd runs `streamgate archive …` against a gateway's admin
// listener.
func archiveCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprint(stderr, archiveUsage)
		if len(args) == 0 {
			return usageError{code: 2}
		}
		return nil
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("archive "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	admin := fs.String("admin", envOr("STREAMGATE_ADMIN", "http://127.0.0.1:9090"), "the gateway's admin listener (env STREAMGATE_ADMIN)")
	timeout := fs.Duration("timeout", 30*time.Second, "request timeout (export: per answer, which is streamed)")
	caFile := fs.String("cacert", os.Getenv("STREAMGATE_CACERT"), "PEM CA certificates to trust for an https:// admin listener (env STREAMGATE_CACERT)")
	certFile := fs.String("cert", os.Getenv("STREAMGATE_CERT"), "PEM client certificate, for an admin listener that asks for one (env STREAMGATE_CERT)")
	keyFile := fs.String("certkey", os.Getenv("STREAMGATE_CERTKEY"), "the client certificate's PEM private key (env STREAMGATE_CERTKEY)")
	var network, feed, from, to, format, out *string
	var wait *bool
	switch sub {
	case "fill", "export":
		network = fs.String("network", "", "network: mainnet or testnet")
		feed = fs.String("feed", "", "stream ID (0x and 64 hex digits)")
		from = fs.String("from", "", "first second: unix seconds or RFC 3339")
		to = fs.String("to", "", "last second (default: now)")
		if sub == "fill" {
			wait = fs.Bool("wait", false, "wait until the fill is done or failed, printing its progress")
		} else {
			format = fs.String("format", archive.ExportJSONLines, "jsonl or csv")
			out = fs.String("o", "", "write to FILE instead of the standard output")
		}
	case "fills":
	default:
		fmt.Fprintf(stderr, "streamgate archive: unknown command %q\n\n%s", sub, archiveUsage)
		return usageError{code: 2}
	}
	if err := fs.Parse(args); err != nil || fs.NArg() != 0 {
		return usageError{code: 2}
	}
	base := strings.TrimRight(*admin, "/")
	tlsClient, err := getClient(*caFile, *certFile, *keyFile)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: tlsClient.Transport, Timeout: *timeout}
	switch sub {
	case "fills":
		return printFills(ctx, client, base, stdout)
	case "fill":
		q := spanQuery(*network, *feed, *from, *to)
		var started struct{ Fill archive.FillProgress }
		if err := adminJSON(ctx, client, http.MethodPost, base+archive.PathFill+"?"+q, &started); err != nil {
			return err
		}
		p := started.Fill
		fmt.Fprintf(stdout, "fill %s queued: %s %s [%d, %d], %d seconds\n", p.ID, p.Network, p.Stream, p.From, p.To, p.Seconds())
		if !*wait {
			return nil
		}
		return waitFill(ctx, client, base, p.ID, stdout)
	default: // export
		if *format != archive.ExportJSONLines && *format != archive.ExportCSV {
			fmt.Fprintln(stderr, "streamgate archive export: -format is jsonl or csv")
			return usageError{code: 2}
		}
		w := stdout
		if *out != "" {
			f, err := os.Create(*out)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		client.Timeout = 0 // the answer is streamed; the context bounds it
		return exportSpan(ctx, client, base+archive.PathExport+"?"+spanQuery(*network, *feed, *from, *to)+"&format="+*format, w, stderr)
	}
}

func spanQuery(network, feed, from, to string) string {
	q := url.Values{"network": {network}, "feedID": {feed}, "from": {from}}
	if to != "" {
		q.Set("to", to)
	}
	return q.Encode()
}

// adminJSON sends a request and decodes its JSON answer into v; an error
// answer is returned with its message.
func adminJSON(ctx context.Context, c *http.Client, method, u string, v any) error {
	req, err := adminRequest(ctx, method, u)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return adminError(resp.StatusCode, body)
	}
	return json.Unmarshal(body, v)
}

func adminError(status int, body []byte) error {
	var e struct{ Message string }
	if json.Unmarshal(body, &e) == nil && e.Message != "" {
		return fmt.Errorf("%d %s: %s", status, http.StatusText(status), e.Message)
	}
	return fmt.Errorf("%d %s", status, http.StatusText(status))
}

func printFills(ctx context.Context, c *http.Client, base string, stdout io.Writer) error {
	var got struct{ Fills []archive.FillProgress }
	if err := adminJSON(ctx, c, http.MethodGet, base+archive.PathFills, &got); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tNETWORK\tSTREAM\tFROM\tTO\tCOVERED\tPAGES\tREPORTS\tERROR")
	for _, p := range got.Fills {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d/%d\t%d\t%d\t%s\n", p.ID, p.State, p.Network, p.Stream, p.From, p.To,
			p.Covered, p.Seconds(), p.Pages, p.Reports, p.Error)
	}
	return tw.Flush()
}

// waitFill polls the job until it is done or failed.
func waitFill(ctx context.Context, c *http.Client, base, id string, stdout io.Writer) error {
	last := ""
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		var got struct{ Fills []archive.FillProgress }
		if err := adminJSON(ctx, c, http.MethodGet, base+archive.PathFills, &got); err != nil {
			return err
		}
		for _, p := range got.Fills {
			if p.ID != id {
				continue
			}
			line := fmt.Sprintf("%s: %s, %d of %d seconds covered, %d pages, %d reports", p.ID, p.State, p.Covered, p.Seconds(), p.Pages, p.Reports)
			if line != last {
				fmt.Fprintln(stdout, line)
				last = line
			}
			switch p.State {
			case archive.FillDone:
				return nil
			case archive.FillFailed:
				return fmt.Errorf("fill %s failed: %s", id, p.Error)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func exportSpan(ctx context.Context, c *http.Client, u string, w, stderr io.Writer) error {
	req, err := adminRequest(ctx, http.MethodGet, u)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return adminError(resp.StatusCode, body)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return err
	}
	if e := resp.Trailer.Get("X-Archive-Error"); e != "" {
		return fmt.Errorf("export cut short: %s", e)
	}
	fmt.Fprintf(stderr, "%s reports exported\n", resp.Trailer.Get("X-Archive-Reports"))
	return nil
}

// adminRequest is a request to the admin listener, with its token
// (STREAMGATE_ADMIN_TOKEN) when one is set, as streamgate usage sends it.
func adminRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("bad -admin URL: %w", err)
	}
	if tok := os.Getenv("STREAMGATE_ADMIN_TOKEN"); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req, nil
}
