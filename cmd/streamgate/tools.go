package main

import (
	"bytes"
	"context"
	"crypto/rand"
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
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return usageError{code: 1}
	}
	fmt.Fprintf(stdout, "%s: ok (%d networks, %d teams)\n", *path, len(cfg.Networks), len(cfg.Teams))
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
func get(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("url", envOr("STREAMGATE_URL", "http://127.0.0.1:8080"), "gateway address (env STREAMGATE_URL)")
	key := fs.String("key", os.Getenv("STREAMGATE_KEY"), "key id (env STREAMGATE_KEY)")
	secret := fs.String("secret", "", "key secret (env STREAMGATE_SECRET; prefer the variable: flags show in ps)")
	anonymous := fs.Bool("anonymous", false, "send no authentication headers (the catalog allows it)")
	timeout := fs.Duration("timeout", 10*time.Second, "request timeout")
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s %s\n", resp.Proto, resp.Status)
	for _, h := range []string{"X-Cache", "Age", "Cache-Control", "RateLimit", "RateLimit-Policy", "Retry-After", "X-Request-Id"} {
		if v := resp.Header.Get(h); v != "" {
			fmt.Fprintf(stderr, "%s: %s\n", h, v)
		}
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		pretty.WriteByte('\n')
		stdout.Write(pretty.Bytes())
	} else {
		stdout.Write(body)
	}
	if resp.StatusCode >= 400 {
		return usageError{code: 1}
	}
	return nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
