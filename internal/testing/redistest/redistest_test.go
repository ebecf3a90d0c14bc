package redistest

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartStopRestart(t *testing.T) {
	s := New(t)
	if !ping(s.Addr()) {
		t.Fatalf("server at %s does not answer PING", s.Addr())
	}
	if got, want := s.URL(), "redis://"+s.Addr()+"/0"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
	s.Stop()
	if ping(s.Addr()) {
		t.Fatal("server still answers after Stop")
	}
	s.Stop() // a second Stop does nothing
	s.Restart()
	if !ping(s.Addr()) {
		t.Fatal("server does not answer after Restart")
	}
}

func TestStartURL(t *testing.T) {
	if url := Start(t); len(url) <= len("redis://") {
		t.Fatalf("Start returned %q", url)
	}
}

func TestPauseResume(t *testing.T) {
	s := New(t)
	s.Pause()
	// A paused server accepts the connection (the kernel does) but does
	// not answer.
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		t.Fatalf("dial a paused server: %v", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatalf("write to a paused server: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	rd := bufio.NewReader(c)
	if line, err := rd.ReadString('\n'); err == nil {
		t.Fatalf("a paused server answered %q", line)
	}
	s.Resume()
	// The PING sent while it was paused is answered now.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := rd.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("after Resume: %q, %v", line, err)
	}
	if !ping(s.Addr()) {
		t.Fatal("server does not answer after Resume")
	}
	s.Pause()
	s.Stop() // a paused server can be stopped
}

func TestClusterFailover(t *testing.T) {
	c := NewCluster(t)
	if n := len(c.Masters()); n != 3 {
		t.Fatalf("%d masters, want 3", n)
	}
	const key = "{team-a}:x"
	setReplicated(t, c.MasterFor(key).Addr(), key)
	killed := c.KillMaster(key)
	took := c.WaitFailover(killed)
	t.Logf("cluster failover took %v", took)
	m := c.MasterFor(key)
	if m == killed || !m.Running() {
		t.Fatalf("slot of %q still on the killed master %s", key, killed.Addr())
	}
	if got, err := command(m.Addr(), "get", key); err != nil || got != "1" {
		t.Fatalf("get %q on the new master %s = %q, %v; want the replicated 1", key, m.Addr(), got, err)
	}
	if n := len(c.Masters()); n != 3 {
		t.Fatalf("%d masters after the failover, want 3", n)
	}
}

func TestSentinelFailover(t *testing.T) {
	s := NewSentinel(t)
	old := s.Master()
	if old != s.Data[0] {
		t.Fatalf("master %s, want the first data server %s", old.Addr(), s.Data[0].Addr())
	}
	setReplicated(t, old.Addr(), "k")
	killed := s.KillMaster()
	next, took := s.WaitFailover(killed)
	t.Logf("sentinel failover took %v", took)
	if next == killed || s.Master() != next {
		t.Fatalf("master after the failover %s, killed %s", s.Master().Addr(), killed.Addr())
	}
	if got, err := command(next.Addr(), "get", "k"); err != nil || got != "1" {
		t.Fatalf("get k on the new master = %q, %v; want 1", got, err)
	}
	if _, err := do(next.Addr(), "set", "k", "2"); err != nil {
		t.Fatalf("the new master refuses writes: %v", err)
	}
}

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification's examples and
	// CLUSTER KEYSLOT.
	for key, want := range map[string]int{"123456789": 12739, "foo": 12182, "{user1000}.following": 3443, "{user1000}.followers": 3443, "foo{}{bar}": 8363} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// setReplicated sets key to 1 on the master at addr and waits until its
// replica has it.
func setReplicated(t *testing.T, addr, key string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, key, "1", 0).Err(); err != nil {
		t.Fatalf("set %q on %s: %v", key, addr, err)
	}
	if n, err := c.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("wait for the replica of %s: %d, %v", addr, n, err)
	}
}
