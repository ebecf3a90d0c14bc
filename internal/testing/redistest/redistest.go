// Package redistest runs a real redis-server for tests: on a free loopback
// port, without persistence, stopped when the test ends. The processes
// are started by internal/redisproc; this package ties them to a test.
//
// When redis-server is not installed the test is skipped with a message
// saying so, except when the environment variable CI is "true": there the
// Redis tests must run, and the test fails instead.
package redistest

import (
	"os"
	"syscall"
	"testing"

	"streamgate/internal/testing/redisproc"
)

// Server is a redis-server process owned by one test. Its methods must be
// called from the test's goroutine.
type Server struct {
	t testing.TB
	*redisproc.Server
}

// Start starts a server for t and returns its URL, redis://127.0.0.1:PORT/0.
func Start(t testing.TB) (url string) {
	t.Helper()
	return New(t).URL()
}

// New starts a server for t; it is stopped by t.Cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	p, err := redisproc.Start(lookPath(t, "redis-server"), t.TempDir(), nil)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Server{t: t, Server: p}
}

// lookPath finds a Redis binary, skipping t when it is missing (failing it
// when CI is "true").
func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := redisproc.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed, and CI=true requires the Redis tests to run (install redis-server and redis-sentinel)", name)
		}
		t.Skipf("%s not installed; skipping Redis tests (install redis-server and redis-sentinel)", name)
	}
	return bin
}

// wrap ties the processes ps to t (their Stop is already registered).
func wrap(t testing.TB, ps []*redisproc.Server) []*Server {
	out := make([]*Server, len(ps))
	for i, p := range ps {
		out[i] = &Server{t: t, Server: p}
	}
	return out
}

// Pause stops the server with SIGSTOP: it keeps its port and its
// connections, and the kernel still completes new TCP handshakes, but it
// answers nothing, as a hung Redis. Stop and Restart work on a paused
// server.
func (s *Server) Pause() {
	s.t.Helper()
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// Resume continues a paused server with SIGCONT; it answers again what was
// sent to it meanwhile on the connections that are still open.
func (s *Server) Resume() {
	s.t.Helper()
	if err := s.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// Restart starts the server again on the same port, empty (a cluster node
// keeps its node configuration, so it rejoins its cluster). It stops it
// first if it is running.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.Server.Restart(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

// command sends one command to the server at addr on a fresh connection
// and returns its reply as text.
func command(addr string, args ...any) (string, error) { return redisproc.Command(addr, args...) }

// do sends one command to the server at addr on a fresh connection and
// returns its reply (RESP2).
func do(addr string, args ...any) (any, error) { return redisproc.Do(addr, args...) }

// ping reports whether a Redis server at addr answers PING.
func ping(addr string) bool {
	v, err := redisproc.Command(addr, "ping")
	return err == nil && v == "PONG"
}
