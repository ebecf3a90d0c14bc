package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the name the sentinels of a Sentinel set monitor their
// master under.
const SentinelMaster = "mymaster"

// Sentinel timings, in milliseconds: short, so a failover takes seconds.
const (
	sentinelDownAfter       = 1000
	sentinelFailoverTimeout = 3000
)

// Sentinel is a real Sentinel set owned by one test: a master, one replica
// and three redis-sentinel processes (quorum 2) on free loopback ports.
// Its methods must be called from the test's goroutine.
type Sentinel struct {
	t         testing.TB
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
	bin := lookPath(t, "redis-server")
	sbin := lookPath(t, "redis-sentinel")
	master := newServer(t, bin, nil)
	replica := newServer(t, bin, func(s *Server) []string {
		return append(s.plainArgs(), "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	})
	s := &Sentinel{t: t, Data: []*Server{master, replica}}
	for range 3 {
		s.Sentinels = append(s.Sentinels, newServer(t, sbin, func(sn *Server) []string {
			return sentinelArgs(t, sn, master.port)
		}))
	}
	s.wait("the Sentinel set to form", func() error {
		info, err := command(replica.Addr(), "info", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s is not in sync", replica.Addr())
		}
		for _, sn := range s.Sentinels {
			for what, want := range map[string]int{"replicas": 1, "sentinels": 2} {
				v, err := do(sn.Addr(), "sentinel", what, SentinelMaster)
				if err != nil {
					return err
				}
				list, _ := v.([]any)
				if n := len(list); n < want {
					return fmt.Errorf("sentinel %s knows %d %s of %d", sn.Addr(), n, what, want)
				}
			}
		}
		return nil
	})
	return s
}

// sentinelArgs writes a sentinel's configuration file (a sentinel rewrites
// it, so it lives in the server's own directory) and returns its command
// line.
func sentinelArgs(t testing.TB, sn *Server, masterPort int) []string {
	conf := filepath.Join(sn.dir, "sentinel.conf")
	if _, err := os.Stat(conf); err != nil { // a restart keeps what it learned
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
sentinel monitor %s 127.0.0.1 %d 2
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s %d
sentinel parallel-syncs %s 1
`, sn.port, sn.dir, SentinelMaster, masterPort, SentinelMaster, sentinelDownAfter,
			SentinelMaster, sentinelFailoverTimeout, SentinelMaster)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("redistest: write %s: %v", conf, err)
		}
	}
	return []string{conf, "--port", strconv.Itoa(sn.port), "--daemonize", "no", "--logfile", ""}
}

// Addrs returns the sentinels' addresses (127.0.0.1:PORT).
func (s *Sentinel) Addrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Master returns the data server the sentinels name master now.
func (s *Sentinel) Master() *Server {
	s.t.Helper()
	addr, err := s.masterAddr(s.Sentinels[0])
	if err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
	for _, d := range s.Data {
		if d.Addr() == addr {
			return d
		}
	}
	s.t.Fatalf("redistest: the sentinels name %s master, not a server of this set", addr)
	return nil
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
	var next *Server
	for _, d := range s.Data {
		if d != killed {
			next = d
		}
	}
	s.wait("the failover of "+killed.Addr(), func() error {
		for _, sn := range s.Sentinels {
			addr, err := s.masterAddr(sn)
			if err != nil {
				return err
			}
			if addr != next.Addr() {
				return fmt.Errorf("sentinel %s names %s master", sn.Addr(), addr)
			}
		}
		info, err := command(next.Addr(), "info", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return fmt.Errorf("%s is not master yet", next.Addr())
		}
		return nil
	})
	return next, time.Since(start)
}

// masterAddr asks sentinel sn for SENTINEL get-master-addr-by-name.
func (s *Sentinel) masterAddr(sn *Server) (string, error) {
	out, err := command(sn.Addr(), "sentinel", "get-master-addr-by-name", SentinelMaster)
	if err != nil {
		return "", err
	}
	f := strings.Fields(strings.Trim(out, "[]"))
	if len(f) != 2 {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name: %q", sn.Addr(), out)
	}
	return net.JoinHostPort(f[0], f[1]), nil
}

// wait polls check until it returns nil, failing the test after
// settleTimeout with check's last error.
func (s *Sentinel) wait(what string, check func() error) {
	s.t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: waiting for %s: %v", what, err)
		}
		time.Sleep(pollEvery)
	}
}
