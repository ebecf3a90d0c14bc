package redisproc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SentinelMaster is the name the sentinels of a Sentinel set monitor their
// master under.
const SentinelMaster = "mymaster"

// Sentinel timings, in milliseconds: short, so a failover takes seconds.
const (
	sentinelDownAfter       = 1000
	sentinelFailoverTimeout = 3000
)

// Sentinel is a real Sentinel set: a master, one replica and three
// redis-sentinel processes (quorum 2) on free loopback ports. Its methods
// are not safe for concurrent use.
type Sentinel struct {
	Data      []*Server // the master and the replica, as started
	Sentinels []*Server
}

// StartSentinel starts a master and a replica of it (bin), and three
// sentinels (sbin) that monitor it as SentinelMaster with quorum 2, their
// working files under dir, and waits until the replica is in sync and
// every sentinel knows the replica and the two other sentinels. On an
// error it stops what it started.
func StartSentinel(bin, sbin, dir string) (_ *Sentinel, err error) {
	s := &Sentinel{}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	start := func(name, bin string, args Args) (*Server, error) {
		d, err := subdir(dir, name)
		if err != nil {
			return nil, err
		}
		return Start(bin, d, args)
	}
	master, err := start("master", bin, nil)
	if err != nil {
		return nil, err
	}
	s.Data = append(s.Data, master)
	replica, err := start("replica", bin, func(r *Server) []string {
		return append(r.PlainArgs(), "--replicaof", "127.0.0.1", strconv.Itoa(master.port))
	})
	if err != nil {
		return nil, err
	}
	s.Data = append(s.Data, replica)
	for i := range 3 {
		var confErr error
		sn, err := start("sentinel-"+strconv.Itoa(i), sbin, func(sn *Server) []string {
			args, err := sentinelArgs(sn, master.port)
			confErr = err
			return args
		})
		if confErr != nil {
			return nil, confErr
		}
		if err != nil {
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, sn)
	}
	err = waitFor(func() error {
		info, err := Command(replica.Addr(), "info", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "master_link_status:up") {
			return fmt.Errorf("replica %s is not in sync", replica.Addr())
		}
		for _, sn := range s.Sentinels {
			for what, want := range map[string]int{"replicas": 1, "sentinels": 2} {
				v, err := Do(sn.Addr(), "sentinel", what, SentinelMaster)
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
	if err != nil {
		return nil, fmt.Errorf("redisproc: waiting for the Sentinel set to form: %w", err)
	}
	return s, nil
}

// Stop stops the sentinels and the data servers.
func (s *Sentinel) Stop() {
	for _, sn := range s.Sentinels {
		sn.Stop()
	}
	for _, d := range s.Data {
		d.Stop()
	}
}

// sentinelArgs writes a sentinel's configuration file (a sentinel rewrites
// it, so it lives in the server's own directory) and returns its command
// line.
func sentinelArgs(sn *Server, masterPort int) ([]string, error) {
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
			return nil, fmt.Errorf("redisproc: write %s: %w", conf, err)
		}
	}
	return []string{conf, "--port", strconv.Itoa(sn.port), "--daemonize", "no", "--logfile", ""}, nil
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
func (s *Sentinel) Master() (*Server, error) {
	addr, err := s.masterAddr(s.Sentinels[0])
	if err != nil {
		return nil, err
	}
	for _, d := range s.Data {
		if d.Addr() == addr {
			return d, nil
		}
	}
	return nil, fmt.Errorf("redisproc: the sentinels name %s master, not a server of this set", addr)
}

// WaitFailover waits, at most SettleTimeout, until the failover away from
// killed (a master that was stopped) is over: every sentinel names the
// other data server master and that server says role:master. It returns
// the new master.
func (s *Sentinel) WaitFailover(killed *Server) (*Server, error) {
	var next *Server
	for _, d := range s.Data {
		if d != killed {
			next = d
		}
	}
	err := waitFor(func() error {
		for _, sn := range s.Sentinels {
			addr, err := s.masterAddr(sn)
			if err != nil {
				return err
			}
			if addr != next.Addr() {
				return fmt.Errorf("sentinel %s names %s master", sn.Addr(), addr)
			}
		}
		info, err := Command(next.Addr(), "info", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return fmt.Errorf("%s is not master yet", next.Addr())
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redisproc: waiting for the failover of %s: %w", killed.Addr(), err)
	}
	return next, nil
}

// masterAddr asks sentinel sn for SENTINEL get-master-addr-by-name.
func (s *Sentinel) masterAddr(sn *Server) (string, error) {
	out, err := Command(sn.Addr(), "sentinel", "get-master-addr-by-name", SentinelMaster)
	if err != nil {
		return "", err
	}
	f := strings.Fields(strings.Trim(out, "[]"))
	if len(f) != 2 {
		return "", fmt.Errorf("redisproc: sentinel %s: get-master-addr-by-name: %q", sn.Addr(), out)
	}
	return net.JoinHostPort(f[0], f[1]), nil
}
