// Package testport gives tests loopback ports that no one else takes in
// the meantime.
//
// A port listened on and closed again is not dead, nor free for later: the
// kernel hands it to the next listener that asks for any free port, in this
// process or another one on the machine. Refusing holds a port that
// refuses every connection and that no other socket can bind until the
// test listens on it itself; Free retries a start that binds a port by
// number when another socket took it in between.
package testport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
)

// Port is a loopback TCP port held by a socket that is bound but does not
// listen: a connection to it is refused, as to a port nothing listens on,
// and no other socket can bind it (the socket does not allow its address
// to be reused), until the test ends or Listen listens on it.
type Port struct {
	addr string

	mu       sync.Mutex
	fd       int // -1 once handed to a listener or closed
	listener net.Listener
}

// Refusing returns a held Port, released when t ends.
func Refusing(t testing.TB) *Port {
	t.Helper()
	p, err := hold()
	if err != nil {
		t.Fatalf("testport: %v", err)
	}
	t.Cleanup(p.close)
	return p
}

func hold() (*Port, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("getsockname: %w", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return nil, fmt.Errorf("getsockname: %T", sa)
	}
	return &Port{addr: fmt.Sprintf("127.0.0.1:%d", in.Port), fd: fd}, nil
}

// Addr is the port's address, 127.0.0.1:port.
func (p *Port) Addr() string { return p.addr }

// Listen starts listening on the port: connections to it are accepted by
// the returned listener from now on. It is closed when the test ends, or
// by its Close. Listen may be called once.
func (p *Port) Listen() (net.Listener, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd < 0 {
		return nil, errors.New("testport: the port is no longer held")
	}
	if err := syscall.Listen(p.fd, syscall.SOMAXCONN); err != nil {
		return nil, fmt.Errorf("testport: listen: %w", err)
	}
	f := os.NewFile(uintptr(p.fd), "testport "+p.addr)
	p.fd = -1
	ln, err := net.FileListener(f) // a copy of the socket
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("testport: %w", err)
	}
	p.listener = ln
	return ln, nil
}

func (p *Port) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fd >= 0 {
		syscall.Close(p.fd)
		p.fd = -1
	}
	if p.listener != nil {
		p.listener.Close()
	}
}

// freeTries bounds Free's attempts: each fails only if another socket
// took a port in the moment between two binds.
const freeTries = 5

// Free calls start with the address of a loopback port that was free a
// moment ago, for a server that binds it by number (when it cannot be
// told to bind any free port and say which: several networks sharing one
// listener need its address in advance). While start's error is
// syscall.EADDRINUSE (another socket took the port in between), it tries
// again with another port, a few times; it returns start's last error.
func Free(t testing.TB, start func(addr string) error) error {
	t.Helper()
	var err error
	for range freeTries {
		ln, lerr := net.Listen("tcp", "127.0.0.1:0")
		if lerr != nil {
			return fmt.Errorf("testport: %w", lerr)
		}
		addr := ln.Addr().String()
		ln.Close()
		if err = start(addr); !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
		t.Logf("testport: %s was taken before it was bound; another port", addr)
	}
	return err
}
