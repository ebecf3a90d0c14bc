package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/don"
	"streamgate/server"
)

// check validates a configuration file and lists every problem at once.
func check(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "configuration file to check (or give FILE after the flags)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: streamgate check FILE    (or: streamgate check -config FILE)")
	}
	if err := fs.Parse(args); err != nil {
		return usageError{code: 2}
	}
	switch {
	case *path == "" && fs.NArg() == 1:
		*path = fs.Arg(0)
	case *path == "" || fs.NArg() > 0:
		fmt.Fprintln(stderr, "streamgate check: one configuration file is needed: streamgate check FILE (or -config FILE)")
		return usageError{code: 2}
	}
	cfg, err := config.Load(*path)
	if err == nil {
		err = server.CheckBuild(cfg) // what this binary cannot run
	}
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return usageError{code: 1}
	}
	fmt.Fprintf(stdout, "%s: ok (%d networks, %d teams)\n", *path, len(cfg.Networks), len(cfg.Teams))
	for _, w := range server.CheckTLS(cfg, time.Now()) {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	for _, name := range cfg.NetworkNames() {
		n := cfg.Networks[name]
		switch mode := n.VerifyMode(); {
		case mode == config.VerifyOff:
			fmt.Fprintf(stdout, "networks.%s: reports not verified (verify.mode off)\n", name)
		case !n.Verify.Configured():
			fmt.Fprintf(stdout, "networks.%s: reports verified, mode %s, against the embedded simulator's DON\n", name, mode)
		default:
			fmt.Fprintf(stdout, "networks.%s: reports verified, mode %s, against %d DON configurations\n", name, mode, len(n.Verify.AllDONs()))
		}
	}
	for _, line := range cfg.SharingSummary() {
		fmt.Fprintln(stdout, line)
	}
	return nil
}

// keygen prints a new key ID (a random UUID, like the upstream's) and a
// 32-byte secret.
func keygen(stdout io.Writer) error {
	var id [16]byte
	var secret [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return err
	}
	id[6] = id[6]&0x0f | 0x40 // version 4
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	h := hex.EncodeToString(id[:])
	fmt.Fprintf(stdout, "id: %s-%s-%s-%s-%s\nsecret: %s\n", h[:8], h[8:12], h[12:16], h[16:20], h[20:], hex.EncodeToString(secret[:]))
	return nil
}

// get sends one signed GET request and pretty-prints the JSON answer. The
// key and secret come from flags or STREAMGATE_KEY and STREAMGATE_SECRET.
// With -decode it asks for the decoded view and prints each report's
// decoded fields and verification.
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", envOr("STREAMGATE_URL", "http://127.0.0.1:8080"), "gateway address (env STREAMGATE_URL)")
	key := fs.String("key", os.Getenv("STREAMGATE_KEY"), "key id (env STREAMGATE_KEY)")
	secret := fs.String("secret", "", "key secret (env STREAMGATE_SECRET; prefer the variable: flags show in ps)")
	anonymous := fs.Bool("anonymous", false, "send no authentication headers (the catalog allows it)")
	timeout := fs.Duration("timeout", 10*time.Second, "request timeout")
	decode := fs.Bool("decode", false, "ask for the decoded view (Accept: "+don.DecodedMediaType+") and print each report's fields and verification")
	caFile := fs.String("cacert", os.Getenv("STREAMGATE_CACERT"), "PEM CA certificates to trust for an https:// gateway, besides the system's (env STREAMGATE_CACERT)")
	certFile := fs.String("cert", os.Getenv("STREAMGATE_CERT"), "PEM client certificate, for a listener that asks for one (env STREAMGATE_CERT)")
	keyFile := fs.String("certkey", os.Getenv("STREAMGATE_CERTKEY"), "the client certificate's PEM private key (env STREAMGATE_CERTKEY)")
	maxBody := fs.Int64("max-body", defaultGetMaxBody, "the largest answer read, in bytes; a larger one is refused unprinted")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: streamgate get [flags] PATH    e.g. '/api/v1/reports/latest?feedID=0x…'")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return usageError{code: 2}
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return usageError{code: 2}
	}
	if *secret == "" {
		*secret = os.Getenv("STREAMGATE_SECRET")
	}
	path := fs.Arg(0)
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(*base, "/")+path, nil)
	if err != nil {
		return fmt.Errorf("bad url or path: %w", err)
	}
	if !*anonymous {
		if *key == "" || *secret == "" {
			fmt.Fprintln(stderr, "streamgate get: a key and a secret are needed (-key and STREAMGATE_SECRET), or -anonymous")
			return usageError{code: 2}
		}
		auth.Sign(req, *key, []byte(*secret), time.Now())
	}
	if *decode {
		req.Header.Set("Accept", don.DecodedMediaType)
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
	// The server is not trusted with the client's memory: the answer is
	// read up to -max-body, and looked through (its depth, the size of
	// its indented form) before it is decoded or pretty-printed.
	body, err := io.ReadAll(io.LimitReader(resp.Body, *maxBody+1))
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s %s\n", resp.Proto, resp.Status)
	for _, h := range []string{"X-Cache", "Age", "Cache-Control", "RateLimit", "RateLimit-Policy", "Retry-After", "X-Request-Id"} {
		if v := resp.Header.Get(h); v != "" {
			fmt.Fprintf(stderr, "%s: %s\n", h, v)
		}
	}
	if int64(len(body)) > *maxBody {
		fmt.Fprintf(stderr, "streamgate get: the answer is longer than %d bytes (-max-body): not printed\n", *maxBody)
		return usageError{code: 1}
	}
	shape := jsonShapeOf(body)
	var pretty bytes.Buffer
	switch {
	case shape.tooDeep:
		fmt.Fprintf(stderr, "streamgate get: the answer nests JSON deeper than %d levels: not printed\n", getMaxDepth)
		return usageError{code: 1}
	case !shape.valid:
		stdout.Write(body)
	case *decode && resp.Header.Get("Content-Type") == don.DecodedMediaType && printDecoded(stdout, body) == nil:
		// printed
	case shape.indented > 4*len(body)+(1<<20):
		// Valid, shallow enough, but so many values so deep that its
		// indented form would be several times its size: as it came.
		stdout.Write(body)
		fmt.Fprintln(stdout)
	case json.Indent(&pretty, body, "", "  ") == nil:
		pretty.WriteByte('\n')
		stdout.Write(pretty.Bytes())
	default:
		stdout.Write(body)
	}
	if resp.StatusCode >= 400 {
		return usageError{code: 1}
	}
	return nil
}

const (
	// defaultGetMaxBody is get's -max-body: far above any answer of the
	// gateway (a bulk page of decoded reports is some hundreds of KiB).
	defaultGetMaxBody = 32 << 20
	// getMaxDepth is the deepest JSON get decodes or indents; the
	// gateway's answers nest five levels at most.
	getMaxDepth = 64
)

// jsonShape is what get learns of an answer before it decodes or indents
// it.
type jsonShape struct {
	valid    bool // one JSON value, nested getMaxDepth deep at most
	tooDeep  bool // JSON nested deeper than getMaxDepth; the walk stopped there
	indented int  // the bytes json.Indent adds with a two-space indent, about
}

// jsonShapeOf walks body's tokens (in constant memory per level), stopping
// at the first level deeper than getMaxDepth, which json.Indent would
// otherwise indent line by line up to its own limit of 10000 levels: a
// megabyte of '[' is indented into hundreds of megabytes before it fails.
func jsonShapeOf(body []byte) jsonShape {
	dec := json.NewDecoder(bytes.NewReader(body))
	var sh jsonShape
	depth := 0
	for {
		t, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			return jsonShape{}
		}
		sh.indented += 1 + 2*depth // a newline and the indent before a value
		if d, ok := t.(json.Delim); ok {
			switch d {
			case '{', '[':
				if depth++; depth > getMaxDepth {
					return jsonShape{tooDeep: true}
				}
			default:
				depth--
			}
		}
		if depth == 0 {
			// One value whole: anything after it but space is not the
			// one JSON value get prints indented.
			if _, err := dec.Token(); err != io.EOF {
				return jsonShape{}
			}
			break
		}
	}
	sh.valid = depth == 0 && len(bytes.TrimSpace(body)) > 0
	return sh
}

// getClient is get's HTTP client: the default one, or one that trusts
// caFile too and presents a client certificate.
func getClient(caFile, certFile, keyFile string) (*http.Client, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return http.DefaultClient, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("-cacert: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-cacert: %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("-cert and -certkey: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// printDecoded prints the reports of a decoded view, one block each: the
// stream and schema, the verification, then every decoded field in schema
// order, with its decimal form where it has one.
func printDecoded(w io.Writer, body []byte) error {
	var doc struct {
		Report  json.RawMessage   `json:"report"`
		Reports []json.RawMessage `json:"reports"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return err
	}
	recs := doc.Reports
	if len(doc.Report) > 0 {
		recs = append(recs, doc.Report)
	}
	for i, raw := range recs {
		var rec struct {
			FeedID       string            `json:"feedID"`
			Decoded      json.RawMessage   `json:"decoded"`
			Decimal      map[string]string `json:"decimal"`
			DecodeError  string            `json:"decodeError"`
			Verification struct {
				Mode         string `json:"mode"`
				Verified     bool   `json:"verified"`
				Signers      int    `json:"signers"`
				ConfigDigest string `json:"configDigest"`
				Cause        string `json:"cause"`
				Meaning      string `json:"meaning"`
			} `json:"verification"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "report %s\n", rec.FeedID)
		v := rec.Verification
		switch {
		case v.Mode == don.ModeOff:
			fmt.Fprintf(w, "  %-22s not checked (verification off)\n", "verification")
		case v.Verified:
			fmt.Fprintf(w, "  %-22s verified: %d signers of config digest %s (mode %s)\n", "verification", v.Signers, v.ConfigDigest, v.Mode)
		default:
			fmt.Fprintf(w, "  %-22s NOT VERIFIED: %s: %s (mode %s)\n", "verification", v.Cause, v.Meaning, v.Mode)
		}
		if rec.DecodeError != "" {
			fmt.Fprintf(w, "  %-22s %s\n", "decode error", rec.DecodeError)
			continue
		}
		fields, err := orderedStrings(rec.Decoded)
		if err != nil {
			return err
		}
		width := 22 // the longest name of the table (interpolatedGoldmanRollPrice) widens the column
		for _, f := range fields {
			width = max(width, len(f[0]))
		}
		for _, f := range fields {
			if d, ok := rec.Decimal[f[0]]; ok {
				fmt.Fprintf(w, "  %-*s %-28s %s\n", width, f[0], f[1], d)
			} else {
				fmt.Fprintf(w, "  %-*s %s\n", width, f[0], f[1])
			}
		}
	}
	return nil
}

// orderedStrings returns the members of a JSON object of strings in their
// order.
func orderedStrings(raw json.RawMessage) ([][2]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("decoded: not an object")
	}
	var out [][2]string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, [2]string{k.(string), v})
	}
	return out, nil
}
