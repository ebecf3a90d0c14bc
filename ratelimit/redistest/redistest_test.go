package redistest

import (
	"testing"
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
