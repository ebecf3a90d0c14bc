package redistest

import (
	"testing"
	"time"

	"streamgate/internal/testing/redisproc"
)

// SentinelMaster is the name the sentinels of a Sentinel set monitor their
// master under.
const SentinelMaster = redisproc.SentinelMaster

// Sentinel is a real Sentinel set owned by one test: a master, one replica
// and three redis-sentinel processes (quorum 2) on free loopback ports.
// Its methods must be called from the test's goroutine.
type Sentinel struct {
	t         testing.TB
	p         *redisproc.Sentinel
	Data      []*Server // the master and the replica, as started
	Sentinels []*Server
}

// NewSentinel starts a master, a replica of it and three sentinels that
// monitor it as SentinelMaster with quorum 2, and waits until the replica
// is in sync and every sentinel knows the replica and the two other
// sentinels. It is stopped by t.Cleanup. The test is skipped (failed when
// CI is "true") when redis-server or redis-sentinel is missing.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	p, err := redisproc.StartSentinel(lookPath(t, "redis-server"), lookPath(t, "redis-sentinel"), t.TempDir())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Sentinel{t: t, p: p, Data: wrap(t, p.Data), Sentinels: wrap(t, p.Sentinels)}
}

// Addrs returns the sentinels' addresses (127.0.0.1:PORT).
func (s *Sentinel) Addrs() []string { return s.p.Addrs() }

// data returns the test's Server of the data process p.
func (s *Sentinel) data(p *redisproc.Server) *Server {
	for _, d := range s.Data {
		if d.Server == p {
			return d
		}
	}
	return nil
}

// Master returns the data server the sentinels name master now.
func (s *Sentinel) Master() *Server {
	s.t.Helper()
	p, err := s.p.Master()
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	return s.data(p)
}

// Replica returns the data server that is not the master now.
func (s *Sentinel) Replica() *Server {
	s.t.Helper()
	m := s.Master()
	for _, d := range s.Data {
		if d != m {
			return d
		}
	}
	return nil
}

// KillMaster SIGKILLs the current master and returns it; WaitFailover
// then waits until the replica has taken over.
func (s *Sentinel) KillMaster() *Server {
	s.t.Helper()
	m := s.Master()
	m.Stop()
	return m
}

// WaitFailover waits until the failover away from killed (a master a test
// stopped) is over: every sentinel names the other data server master and
// that server says role:master. It returns the new master and the time it
// waited.
func (s *Sentinel) WaitFailover(killed *Server) (*Server, time.Duration) {
	s.t.Helper()
	start := time.Now()
	p, err := s.p.WaitFailover(killed.Server)
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	return s.data(p), time.Since(start)
}
