// Package redistest runs a real redis-server for tests: on a free loopback
// port, without persistence, stopped when the test ends.
//
// When redis-server is not installed the test is skipped with a message
// saying so, except when the environment variable CI is "true": there the
// Redis tests must run, and the test fails instead.
package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// Server is a redis-server process owned by one test. Its methods must be
// called from the test's goroutine.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	args func(s *Server) []string // the command line after the binary; nil: a plain server
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  *syncBuffer
}

// Start starts a server for t and returns its URL, redis://127.0.0.1:PORT/0.
func Start(t testing.TB) (url string) {
	t.Helper()
	return New(t).URL()
}

// New starts a server for t; it is stopped by t.Cleanup.
func New(t testing.TB) *Server {
	t.Helper()
	return newServer(t, lookPath(t, "redis-server"), nil)
}

// lookPath finds a Redis binary, skipping t when it is missing (failing it
// when CI is "true").
func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed, and CI=true requires the Redis tests to run (install redis-server and redis-sentinel)", name)
		}
		t.Skipf("%s not installed; skipping Redis tests (install redis-server and redis-sentinel)", name)
	}
	return bin
}

// newServer starts bin on a free port with the command line args returns
// (a plain server's when args is nil); it is stopped by t.Cleanup.
func newServer(t testing.TB, bin string, args func(s *Server) []string) *Server {
	t.Helper()
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: args}
	t.Cleanup(s.Stop)
	var lastErr error
	for range 3 { // another process may take the port between probe and start
		if s.port, lastErr = freePort(); lastErr != nil {
			continue
		}
		if lastErr = s.start(); lastErr == nil {
			return s
		}
	}
	t.Fatalf("redistest: %v", lastErr)
	return nil
}

// URL returns the server's URL, redis://127.0.0.1:PORT/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Addr returns the server's address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Stop kills the server and waits until it has exited. Stopping a stopped
// server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Pause stops the server with SIGSTOP: it keeps its port and its
// connections, and the kernel still completes new TCP handshakes, but it
// answers nothing, as a hung Redis. Stop and Restart work on a paused
// server.
func (s *Server) Pause() {
	s.t.Helper()
	s.signal(syscall.SIGSTOP)
}

// Resume continues a paused server with SIGCONT; it answers again what was
// sent to it meanwhile on the connections that are still open.
func (s *Server) Resume() {
	s.t.Helper()
	s.signal(syscall.SIGCONT)
}

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v: %v", sig, err)
	}
}

// Running reports whether the server's process is running (it has not
// been stopped or killed).
func (s *Server) Running() bool { return s.cmd != nil }

// Restart starts the server again on the same port, empty (a cluster node
// keeps its node configuration, so it rejoins its cluster). It stops it
// first if it is running.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

func (s *Server) start() error {
	s.out = &syncBuffer{}
	var args []string
	if s.args != nil {
		args = s.args(s)
	} else {
		args = s.plainArgs()
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout = s.out
	cmd.Stderr = s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done

	deadline := time.Now().Add(startTimeout)
	for {
		if ping(s.Addr()) {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("redis-server on port %d exited:\n%s", s.port, s.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v:\n%s", s.port, startTimeout, s.out.String())
		}
	}
}

// plainArgs is a data node's command line: loopback only, no persistence.
func (s *Server) plainArgs() []string {
	return []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", "",
		"--daemonize", "no",
	}
}

// ping reports whether a Redis server at addr answers PING.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
