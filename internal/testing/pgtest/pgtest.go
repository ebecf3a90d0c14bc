// Package pgtest runs a real PostgreSQL server for a test: started by
// internal/pgproc on a free loopback port, in a fresh data directory,
// stopped and removed when the test ends.
//
// When PostgreSQL is not installed the test is skipped with a message
// saying so, except when the environment variable CI is "true": there the
// PostgreSQL tests must run, and the test fails instead.
package pgtest

import (
	"os"
	"testing"

	"streamgate/internal/testing/pgproc"
)

// Password is the server's password for its URL's user.
const Password = pgproc.Password

// Server is a PostgreSQL server owned by one test. Its methods must be
// called from the test's goroutine.
type Server struct {
	t testing.TB
	*pgproc.Server
}

// New starts a server for t; it is stopped and its files removed by
// t.Cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	bin, err := pgproc.Find()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v, and CI=true requires the PostgreSQL tests to run (install postgresql)", err)
		}
		t.Skipf("%v; skipping PostgreSQL tests (install postgresql)", err)
	}
	p, err := pgproc.Start(bin)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(p.Remove)
	return &Server{t: t, Server: p}
}

// Restart starts the stopped server again on the same port and data.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.Server.Restart(); err != nil {
		s.t.Fatalf("pgtest: %v", err)
	}
}
