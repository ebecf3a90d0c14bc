package redistest

import (
	"bufio"
	"net"
	"testing"
	"time"
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
