package main

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/hexbytes"
	"streamgate/proxy"
)

// The hit scenario measures each server in a process of its own, so that
// the CPU it reports is the server's alone: this program started again
// with childEnv set to the role ("gateway", "bare" or "bare-hmac"). The
// child reads its setup (one JSON line) on stdin, starts its server on
// loopback, writes one JSON line (childReady) on stdout, and serves until
// its stdin closes. Its control listener answers GET /stats with the
// process's CPU time and allocations (childStats) and GET /profile?start=
// path or ?stop with a CPU profile of the child.
const childEnv = "STREAMGATE_BENCH_CHILD"

// childSetup is what a child is told on stdin.
type childSetup struct {
	Conc      int                     `json:"conc"`       // client keys (benchKey "c", 0..Conc-1)
	LogLevel  string                  `json:"log_level"`  // gateway: access log level, or "off"
	LatestTTL time.Duration           `json:"latest_ttl"` // gateway
	Streams   int                     `json:"streams"`    // gateway: streams to report in childReady
	TLSCert   string                  `json:"tls_cert"`   // gateway: serve https with these PEM files
	TLSKey    string                  `json:"tls_key"`
	Traces    string                  `json:"traces"`      // gateway: the OTLP/HTTP endpoint spans go to; "" no tracing
	Ratio     float64                 `json:"trace_ratio"` // gateway: tracing.sample_ratio
	Answers   map[string]*childAnswer `json:"answers"`     // bare, bare-hmac: request target → answer
}

// childAnswer is a recorded answer a bare server sends as it is.
type childAnswer struct {
	Status int         `json:"status"`
	Header http.Header `json:"header"`
	Body   []byte      `json:"body"`
}

// childReady is the child's first line on stdout.
type childReady struct {
	URL     string   `json:"url"`     // base URL of the server
	Control string   `json:"control"` // base URL of the control listener
	Procs   int      `json:"procs"`   // GOMAXPROCS
	Feeds   []string `json:"feeds"`   // gateway: live public mainnet streams
}

// childStats are the counters of a child process, read before and after
// each measured run.
type childStats struct {
	CPU        time.Duration `json:"cpu"`         // user + system, the whole process
	Allocs     uint64        `json:"allocs"`      // heap objects allocated, cumulative
	AllocBytes uint64        `json:"alloc_bytes"` // heap bytes allocated, cumulative
	GCs        uint64        `json:"gcs"`         // completed GC cycles
}

func readChildStats() childStats {
	s := []metrics.Sample{
		{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	return childStats{CPU: processCPU(), Allocs: s[0].Value.Uint64(), AllocBytes: s[1].Value.Uint64(), GCs: s[2].Value.Uint64()}
}

// runChild is the child's main: role is the value of childEnv.
func runChild(role string, stdin io.Reader, stdout io.Writer) error {
	in := bufio.NewReader(stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("child %s: reading setup: %w", role, err)
	}
	var setup childSetup
	if err := json.Unmarshal(line, &setup); err != nil {
		return fmt.Errorf("child %s: setup: %w", role, err)
	}
	ready := childReady{Procs: runtime.GOMAXPROCS(0)}
	switch role {
	case "gateway":
		sc := stackConfig{LatestTTL: setup.LatestTTL, ClientKeys: setup.Conc, LogLevel: setup.LogLevel, TeamQuota: true}
		if setup.TLSCert != "" {
			sc.TLS = &config.TLS{CertFile: setup.TLSCert, KeyFile: setup.TLSKey}
		}
		if setup.Traces != "" {
			sc.Tracing = config.Tracing{OTLPEndpoint: setup.Traces, Protocol: config.TracingHTTP, SampleRatio: setup.Ratio}
		}
		s, err := startStack(sc)
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.warm(context.Background()); err != nil {
			return err
		}
		if ready.Feeds, err = liveStreams(s.sim, mainnet, setup.Streams); err != nil {
			return err
		}
		ready.URL = s.gateway[mainnet]
	case "bare", "bare-hmac":
		var h http.Handler = bareHandler(setup.Answers)
		if role == "bare-hmac" {
			keys := map[string][]byte{}
			for i := range setup.Conc {
				id, secret := benchKey("c", i)
				keys[id] = []byte(secret)
			}
			h = hmacHandler(keys, 5*time.Second, h)
		}
		// The gateway's http.Server settings (timeouts, header limit), so
		// that net/http does the same work per request on both sides.
		url, stop, err := serveLoopbackWith(proxy.NewServer(h, config.Default().Server, nil))
		if err != nil {
			return err
		}
		defer stop()
		ready.URL = url
	default:
		return fmt.Errorf("unknown child role %q", role)
	}
	ctl, stop, err := serveLoopback(controlHandler())
	if err != nil {
		return err
	}
	defer stop()
	ready.Control = ctl
	if err := json.NewEncoder(stdout).Encode(ready); err != nil {
		return err
	}
	io.Copy(io.Discard, in) // until the parent closes stdin or exits
	return nil
}

// serveLoopback serves h on a free loopback port and returns its base URL.
func serveLoopback(h http.Handler) (string, func(), error) {
	return serveLoopbackWith(&http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second})
}

// serveLoopbackWith serves srv on a free loopback port.
func serveLoopbackWith(srv *http.Server) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

func controlHandler() http.Handler {
	var mu sync.Mutex
	var prof *os.File
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(readChildStats())
	})
	mux.HandleFunc("GET /profile", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if path := r.URL.Query().Get("start"); path != "" && prof == nil {
			f, err := os.Create(path)
			if err == nil {
				if err = pprof.StartCPUProfile(f); err != nil {
					f.Close()
				}
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			prof = f
			return
		}
		if r.URL.Query().Has("stop") && prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
			prof = nil
		}
	})
	return mux
}

// bareHandler answers each request target with its recorded answer: the
// same status, headers and bytes, and nothing else. It is the floor a Go
// HTTP server on this machine sets.
func bareHandler(answers map[string]*childAnswer) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.RequestURI]
		if a == nil {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		for k, v := range a.Header {
			h[k] = v
		}
		w.WriteHeader(a.Status)
		w.Write(a.Body)
	}
}

// hmacHandler verifies the Data Streams signature of every request, as the
// gateway does, before next answers it: the three headers, the key, the
// timestamp within maxSkew, and the HMAC-SHA256 of "METHOD target
// bodyHash key timestamp" under the key's secret, with keyed HMAC states
// reused rather than keyed afresh for each request. It is written apart
// from package auth, so that it also checks the gateway's scheme.
func hmacHandler(secrets map[string][]byte, maxSkew time.Duration, next http.Handler) http.HandlerFunc {
	type state struct {
		mac hash.Hash
		buf []byte
	}
	pools := make(map[string]*sync.Pool, len(secrets))
	for id, secret := range secrets {
		pools[id] = &sync.Pool{New: func() any { return &state{mac: hmac.New(sha256.New, secret), buf: make([]byte, 0, 256)} }}
	}
	canon := func(k string) string { return http.CanonicalHeaderKey(k) }
	hKey, hTS, hSig := canon(auth.HeaderAuthorization), canon(auth.HeaderTimestamp), canon(auth.HeaderSignature)
	first := func(h http.Header, k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	return func(w http.ResponseWriter, r *http.Request) {
		id, ts, sig := first(r.Header, hKey), first(r.Header, hTS), first(r.Header, hSig)
		pool := pools[id]
		millis, err := strconv.ParseInt(ts, 10, 64)
		var got [sha256.Size]byte
		if pool == nil || err != nil || len(sig) != 2*sha256.Size || !hexbytes.Decode(got[:], sig) {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if skew := time.Since(time.UnixMilli(millis)); skew > maxSkew || skew < -maxSkew {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		st := pool.Get().(*state)
		b := append(st.buf[:0], r.Method...)
		b = append(b, ' ')
		b = append(b, r.RequestURI...)
		b = append(b, ' ')
		b = append(b, auth.EmptyBodyHash...)
		b = append(b, ' ')
		b = append(b, id...)
		b = append(b, ' ')
		b = append(b, ts...)
		st.mac.Reset()
		st.mac.Write(b)
		var want [sha256.Size]byte
		ok := hmac.Equal(st.mac.Sum(want[:0]), got[:])
		st.buf = b
		pool.Put(st)
		if !ok {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	}
}

// child is a server process of the hit scenario.
type child struct {
	role  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready childReady
	http  *http.Client
}

// startChild starts this program again as a child of role with setup,
// pinned to cpu by taskset when cpu is not empty, and waits for its ready
// line.
func startChild(ctx context.Context, role string, setup childSetup, cpu string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if cpu != "" {
		cmd = exec.Command("taskset", "-c", cpu, exe)
	} else {
		cmd = exec.Command(exe)
	}
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{role: role, cmd: cmd, stdin: stdin, http: &http.Client{Timeout: 30 * time.Second}}
	fail := func(err error) (*child, error) {
		c.stop()
		return nil, fmt.Errorf("child %s: %w", role, err)
	}
	line, err := json.Marshal(setup)
	if err != nil {
		return fail(err)
	}
	if _, err := stdin.Write(append(line, '\n')); err != nil {
		return fail(err)
	}
	type readyOrErr struct {
		r   childReady
		err error
	}
	got := make(chan readyOrErr, 1)
	go func() {
		var r childReady
		err := json.NewDecoder(stdout).Decode(&r)
		got <- readyOrErr{r, err}
	}()
	select {
	case r := <-got:
		if r.err != nil {
			return fail(r.err)
		}
		c.ready = r.r
	case <-time.After(60 * time.Second):
		return fail(errors.New("not ready within 60s"))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	return c, nil
}

// stats reads the child's counters.
func (c *child) stats(ctx context.Context) (childStats, error) {
	var s childStats
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.ready.Control+"/stats", nil)
	if err != nil {
		return s, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// profile starts (path not empty) or stops the child's CPU profile.
func (c *child) profile(ctx context.Context, path string) error {
	q := "stop"
	if path != "" {
		q = "start=" + path
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.ready.Control+"/profile?"+q, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("child %s profile: %s", c.role, strings.TrimSpace(string(b)))
	}
	return nil
}

// stop ends the child: its stdin closes, it returns; killed after 10s.
func (c *child) stop() {
	c.stdin.Close()
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
}
