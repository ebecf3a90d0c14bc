// Package redisproc runs real Redis processes on loopback: a redis-server
// on a free port without persistence, a Redis Cluster of three masters
// with one replica each, and a Sentinel set of a master, a replica and
// three sentinels. Every function returns its errors, so that both the
// tests (through internal/redistest) and the load tool can start the
// same servers the same way.
package redisproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// ErrNotInstalled is wrapped by LookPath's error when a Redis binary is
// not on PATH.
var ErrNotInstalled = errors.New("not installed")

// LookPath finds a Redis binary (redis-server, redis-cli,
// redis-sentinel) on PATH.
func LookPath(name string) (string, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("redisproc: %s %w", name, ErrNotInstalled)
	}
	return bin, nil
}

// Args returns a server's command line after the binary; it is called at
// each start, so a restart may differ from the first start.
type Args func(s *Server) []string

// Server is one Redis process (redis-server or redis-sentinel). Its
// methods are not safe for concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	args Args // nil: a plain data node
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  *syncBuffer
}

// Start starts bin with the command line args returns (a plain data
// node's, PlainArgs, when args is nil) on a free loopback port, its
// working files in dir, and waits until it answers PING. Stop it with
// Stop; dir is the caller's to remove.
func Start(bin, dir string, args Args) (*Server, error) {
	s := &Server{bin: bin, dir: dir, args: args}
	var lastErr error
	for range 3 { // another process may take the port between probe and start
		if s.port, lastErr = freePort(); lastErr != nil {
			continue
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("redisproc: %w", lastErr)
}

// URL returns the server's URL, redis://127.0.0.1:PORT/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Addr returns the server's address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory.
func (s *Server) Dir() string { return s.dir }

// Pid returns the process id of the running server, 0 when it is not
// running.
func (s *Server) Pid() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

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

// Signal sends sig to the running server (SIGSTOP pauses it: it keeps its
// port and connections and answers nothing; SIGCONT continues it).
func (s *Server) Signal(sig syscall.Signal) error {
	if s.cmd == nil {
		return fmt.Errorf("redisproc: %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("redisproc: %v: %w", sig, err)
	}
	return nil
}

// Running reports whether the server's process is running (it has not
// been stopped or killed).
func (s *Server) Running() bool { return s.cmd != nil }

// Restart starts the server again on the same port, empty (a cluster node
// keeps its node configuration, so it rejoins its cluster). It stops it
// first if it is running.
func (s *Server) Restart() error {
	s.Stop()
	if err := s.start(); err != nil {
		return fmt.Errorf("redisproc: restart: %w", err)
	}
	return nil
}

func (s *Server) start() error {
	s.out = &syncBuffer{}
	var args []string
	if s.args != nil {
		args = s.args(s)
	} else {
		args = s.PlainArgs()
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
			return fmt.Errorf("%s on port %d exited:\n%s", s.bin, s.port, s.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("%s on port %d did not answer PING within %v:\n%s", s.bin, s.port, startTimeout, s.out.String())
		}
	}
}

// PlainArgs is a data node's command line: loopback only, no persistence.
func (s *Server) PlainArgs() []string {
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

// subdir makes dir/name and returns it.
func subdir(dir, name string) (string, error) {
	d := dir + string(os.PathSeparator) + name
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("redisproc: %w", err)
	}
	return d, nil
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
