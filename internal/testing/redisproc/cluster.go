package redisproc

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// SettleTimeout bounds how long a cluster may take to form and a failover
// to end; the waits poll the servers' own view and return as soon as it
// is in place.
const SettleTimeout = 60 * time.Second

// pollEvery is the pause between two looks at the servers' state while
// waiting for it to change.
const pollEvery = 25 * time.Millisecond

// clusterNodeTimeout is cluster-node-timeout in milliseconds: short, so a
// replica takes over a dead master within a few seconds.
const clusterNodeTimeout = 1000

// Cluster is a real Redis Cluster: three masters with one replica each,
// six redis-server processes on free loopback ports. Its methods are not
// safe for concurrent use.
type Cluster struct {
	Nodes []*Server // the six nodes, in the order they were created
}

// StartCluster starts six cluster-enabled servers (bin), their working
// files under dir, joins them with cli --cluster create (three masters,
// one replica each) and waits until every node says cluster_state:ok and
// knows every other node. On an error it stops what it started.
func StartCluster(bin, cli, dir string) (_ *Cluster, err error) {
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := range 6 {
		d, err := subdir(dir, "node-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		n, err := Start(bin, d, clusterArgs)
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), SettleTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redisproc: redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := c.WaitSettled(""); err != nil {
		return nil, fmt.Errorf("redisproc: waiting for the cluster to form: %w", err)
	}
	return c, nil
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}

// clusterArgs is a cluster node's command line.
func clusterArgs(s *Server) []string {
	return append(s.PlainArgs(),
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
		// A replica may always take over, however long its link was down.
		"--cluster-replica-validity-factor", "0",
	)
}

// Addrs returns the addresses (127.0.0.1:PORT) of all six nodes, the
// stopped ones included.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Masters returns the nodes that serve slots now, as the running nodes see
// it, in the order of Nodes.
func (c *Cluster) Masters() ([]*Server, error) {
	view, err := c.view()
	if err != nil {
		return nil, err
	}
	var ms []*Server
	for _, n := range c.Nodes {
		if e, ok := view.byAddr[n.Addr()]; ok && e.master && !e.failed && e.slots > 0 {
			ms = append(ms, n)
		}
	}
	return ms, nil
}

// MasterFor returns the node that serves key's slot now.
func (c *Cluster) MasterFor(key string) (*Server, error) {
	slot := Slot(key)
	view, err := c.view()
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if e, ok := view.byAddr[n.Addr()]; ok && e.master && !e.failed && e.owns(slot) {
			return n, nil
		}
	}
	return nil, fmt.Errorf("redisproc: no master serves slot %d (key %q)", slot, key)
}

// WaitSettled polls every running node until the cluster is whole, at
// most SettleTimeout: cluster_state:ok everywhere, every node known to
// every node, the slots all served by masters that are not failed, none
// by the node at dead (unless dead is empty: after a master at dead was
// stopped, its replica has taken over), and every replica in sync with
// its master.
func (c *Cluster) WaitSettled(dead string) error {
	return waitFor(func() error { return c.settled(dead) })
}

// waitFor polls check until it returns nil, or returns its last error
// after SettleTimeout.
func waitFor(check func() error) error {
	deadline := time.Now().Add(SettleTimeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(pollEvery)
	}
}

func (c *Cluster) settled(dead string) error {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		info, err := Command(n.Addr(), "cluster", "info")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("%s: cluster_state is not ok", n.Addr())
		}
		nodes, err := Command(n.Addr(), "cluster", "nodes")
		if err != nil {
			return err
		}
		v := parseNodes(nodes)
		if len(v.byAddr) != len(c.Nodes) {
			return fmt.Errorf("%s knows %d nodes of %d", n.Addr(), len(v.byAddr), len(c.Nodes))
		}
		served := 0
		for addr, e := range v.byAddr {
			if dead != "" && addr == dead {
				if !e.failed {
					return fmt.Errorf("%s does not mark %s failed yet", n.Addr(), dead)
				}
				if e.slots > 0 {
					return fmt.Errorf("%s still sees %d slots on %s", n.Addr(), e.slots, dead)
				}
				continue
			}
			if e.failed {
				return fmt.Errorf("%s marks %s failed", n.Addr(), addr)
			}
			if e.master {
				served += e.slots
			}
		}
		if served != 16384 {
			return fmt.Errorf("%s sees %d slots served of 16384", n.Addr(), served)
		}
		if e := v.byAddr[n.Addr()]; e != nil && !e.master {
			repl, err := Command(n.Addr(), "info", "replication")
			if err != nil {
				return err
			}
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica %s is not in sync", n.Addr())
			}
		}
	}
	return nil
}

// clusterView is one node's CLUSTER NODES answer.
type clusterView struct{ byAddr map[string]*clusterEntry }

type clusterEntry struct {
	id             string
	master, failed bool
	slots          int
	ranges         [][2]int
}

func (e *clusterEntry) owns(slot int) bool {
	for _, r := range e.ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// view asks the first running node for CLUSTER NODES.
func (c *Cluster) view() (*clusterView, error) {
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		out, err := Command(n.Addr(), "cluster", "nodes")
		if err != nil {
			return nil, err
		}
		return parseNodes(out), nil
	}
	return nil, fmt.Errorf("redisproc: no cluster node is running")
}

// parseNodes reads CLUSTER NODES: "<id> <ip:port@cport> <flags> <master>
// <ping> <pong> <epoch> <link> <slot>...".
func parseNodes(out string) *clusterView {
	v := &clusterView{byAddr: map[string]*clusterEntry{}}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		e := &clusterEntry{
			id:     f[0],
			master: slices.Contains(flags, "master"),
			failed: slices.Contains(flags, "fail") || slices.Contains(flags, "fail?"),
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being migrated
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if isRange {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				continue
			}
			e.ranges = append(e.ranges, [2]int{a, b})
			e.slots += b - a + 1
		}
		v.byAddr[addr] = e
	}
	return v
}

// Slot returns the cluster slot of key (CRC16 of its hash tag or of the
// whole key, modulo 16384), as Redis computes it.
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC16-CCITT (XMODEM), the cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Command sends one command to the server at addr on a fresh connection
// and returns its reply as text.
func Command(addr string, args ...any) (string, error) {
	v, err := Do(addr, args...)
	if err != nil {
		return "", err
	}
	return fmt.Sprint(v), nil
}

// Do sends one command to the server at addr on a fresh connection and
// returns its reply (RESP2).
func Do(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		MaxRetries:      -1,
		DialTimeout:     time.Second,
		ReadTimeout:     2 * time.Second,
		WriteTimeout:    time.Second,
		PoolSize:        1,
		Protocol:        2,
		DisableIdentity: true,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisproc: %s: %v: %w", addr, args, err)
	}
	return v, nil
}
