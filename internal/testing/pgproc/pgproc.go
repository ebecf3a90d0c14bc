// Package pgproc runs a real PostgreSQL server on loopback for tests and
// benchmarks: initdb into a fresh data directory, then postgres on a free
// loopback port (its unix socket in the data directory, fsync off), with a
// password for TCP connections. PostgreSQL refuses to run as root: when
// the process is root, the server runs as the postgres system user that
// Debian's package makes. Every function returns its errors; the tests
// use it through internal/pgtest.
package pgproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// startTimeout bounds how long a server may take to accept a connection.
const startTimeout = 60 * time.Second

// User is the server's superuser, Password its password over TCP.
const (
	User     = "postgres"
	Password = "pgproc-test-password"
)

// ErrNotInstalled is wrapped by Find's error when PostgreSQL's binaries
// are not found.
var ErrNotInstalled = errors.New("not installed")

// Find returns the directory of initdb and postgres: the newest
// /usr/lib/postgresql/*/bin that has them (Debian's packages do not put
// them on PATH), else the directory of a postgres on PATH.
func Find() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if isExec(filepath.Join(d, "postgres")) && isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		d := filepath.Dir(p)
		if isExec(filepath.Join(d, "initdb")) {
			return d, nil
		}
	}
	return "", fmt.Errorf("pgproc: postgres and initdb %w (no /usr/lib/postgresql/*/bin/postgres, none on PATH)", ErrNotInstalled)
}

// version is the major version in /usr/lib/postgresql/VERSION/bin.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Server is one PostgreSQL server. Its methods are not safe for concurrent
// use.
type Server struct {
	bin  string
	base string // made by Start, removed by Remove
	data string
	port int
	cred *syscall.Credential // nil: run as this process's user
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncBuffer
}

// Start makes a data directory under a fresh directory of the system's
// temporary directory, runs initdb from bin (Find) and starts the server
// on a free loopback port, and waits until it accepts a connection. Stop
// it with Stop, then Remove its files.
func Start(bin string) (_ *Server, err error) {
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = postgresUser(); err != nil {
			return nil, err
		}
	}
	// t.TempDir's directories are 0700 and root's: the postgres user
	// could not reach a data directory there.
	if s.base, err = os.MkdirTemp("", "pgproc-"); err != nil {
		return nil, fmt.Errorf("pgproc: %w", err)
	}
	defer func() {
		if err != nil {
			s.Remove()
		}
	}()
	if err := s.own(s.base); err != nil {
		return nil, err
	}
	s.data = filepath.Join(s.base, "data")
	pw := filepath.Join(s.base, "pwfile")
	if err := os.WriteFile(pw, []byte(Password+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("pgproc: %w", err)
	}
	if err := s.own(pw); err != nil {
		return nil, err
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.data, "-U", User, "--pwfile", pw,
		"--auth-local", "trust", "--auth-host", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	initdb.Dir = s.base
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgproc: initdb: %w\n%s", err, out)
	}
	var lastErr error
	for range 3 { // another process may take the port between probe and start
		if s.port, lastErr = freePort(); lastErr != nil {
			continue
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, fmt.Errorf("pgproc: %w", lastErr)
}

func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgproc: running as root, and PostgreSQL refuses root: no postgres user to run it as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// own gives p to the server's user, when it is not this process's.
func (s *Server) own(p string) error {
	if s.cred == nil {
		return nil
	}
	if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
		return fmt.Errorf("pgproc: %w", err)
	}
	return nil
}

func (s *Server) start() error {
	s.out = &syncBuffer{}
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.data,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+s.data,
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "shared_buffers=32MB",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=warning",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Dir = s.base
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(startTimeout)
	for {
		err := s.ping()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			s.cmd = nil
			return fmt.Errorf("postgres on port %d exited:\n%s", s.port, s.out.String())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("postgres on port %d did not accept a connection within %v (%v):\n%s", s.port, startTimeout, err, s.out.String())
		}
	}
}

// ping connects over TCP with the password and runs SELECT 1.
func (s *Server) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(s.URL())
	if err != nil {
		return err
	}
	cfg.Password = Password
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "SELECT 1")
	return err
}

// URL returns the server's URL without its password (give Password
// apart): postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (s *Server) URL() string {
	u := url.URL{Scheme: "postgres", User: url.User(User), Host: s.Addr(), Path: "/postgres", RawQuery: "sslmode=disable"}
	return u.String()
}

// Addr returns 127.0.0.1:PORT.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Running reports whether the server's process runs.
func (s *Server) Running() bool { return s.cmd != nil }

// Stop shuts the server down (SIGINT, PostgreSQL's fast shutdown: the
// sessions are ended, their transactions rolled back) and waits until it
// has exited. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.cmd = nil
}

// Restart starts the stopped server again on the same port and data.
func (s *Server) Restart() error {
	s.Stop()
	if err := s.start(); err != nil {
		return fmt.Errorf("pgproc: restart: %w", err)
	}
	return nil
}

// Remove stops the server and removes its files.
func (s *Server) Remove() {
	s.Stop()
	if s.base != "" {
		_ = os.RemoveAll(s.base)
	}
}

// Output returns what the server wrote to its stdout and stderr.
func (s *Server) Output() string {
	if s.out == nil {
		return ""
	}
	return s.out.String()
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
	return strings.Clone(b.b.String())
}
