package redistest

import (
	"slices"
	"testing"
	"time"

	"streamgate/internal/testing/redisproc"
)

// Cluster is a real Redis Cluster owned by one test: three masters with
// one replica each, six redis-server processes on free loopback ports.
// Its methods must be called from the test's goroutine.
type Cluster struct {
	t     testing.TB
	p     *redisproc.Cluster
	Nodes []*Server // the six nodes, in the order they were created
}

// NewCluster starts six cluster-enabled servers, joins them with
// redis-cli --cluster create (three masters, one replica each) and waits
// until every node says cluster_state:ok and knows every other node. It is
// stopped by t.Cleanup. The test is skipped (failed when CI is "true")
// when redis-server or redis-cli is missing.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	p, err := redisproc.StartCluster(lookPath(t, "redis-server"), lookPath(t, "redis-cli"), t.TempDir())
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Stop)
	return &Cluster{t: t, p: p, Nodes: wrap(t, p.Nodes)}
}

// Addrs returns the addresses (127.0.0.1:PORT) of all six nodes, the ones
// a test stopped included.
func (c *Cluster) Addrs() []string { return c.p.Addrs() }

// node returns the test's Server of the process p.
func (c *Cluster) node(p *redisproc.Server) *Server {
	i := slices.IndexFunc(c.Nodes, func(n *Server) bool { return n.Server == p })
	return c.Nodes[i]
}

// Masters returns the nodes that serve slots now, as the running nodes see
// it, in the order of Nodes.
func (c *Cluster) Masters() []*Server {
	c.t.Helper()
	ps, err := c.p.Masters()
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	var ms []*Server
	for _, p := range ps {
		ms = append(ms, c.node(p))
	}
	return ms
}

// MasterFor returns the node that serves key's slot now.
func (c *Cluster) MasterFor(key string) *Server {
	c.t.Helper()
	p, err := c.p.MasterFor(key)
	if err != nil {
		c.t.Fatalf("redistest: %v", err)
	}
	return c.node(p)
}

// KillMaster SIGKILLs the master that serves key's slot and returns it;
// WaitFailover then waits until its replica has taken over.
func (c *Cluster) KillMaster(key string) *Server {
	c.t.Helper()
	m := c.MasterFor(key)
	m.Stop()
	return m
}

// WaitFailover waits until the cluster has recovered from the loss of
// killed (a master a test stopped): every running node says
// cluster_state:ok, marks killed as failed, and sees all 16384 slots
// served by running masters, none by killed. It returns the time it
// waited.
func (c *Cluster) WaitFailover(killed *Server) time.Duration {
	c.t.Helper()
	start := time.Now()
	if err := c.p.WaitSettled(killed.Addr()); err != nil {
		c.t.Fatalf("redistest: waiting for the failover of %s: %v", killed.Addr(), err)
	}
	return time.Since(start)
}

// Slot returns the cluster slot of key (CRC16 of its hash tag or of the
// whole key, modulo 16384), as Redis computes it.
func Slot(key string) int { return redisproc.Slot(key) }
