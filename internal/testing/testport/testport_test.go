package testport

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A held port refuses connections and cannot be bound by another socket,
// as a listener's or a server's would try; once listened on, it accepts.
func TestRefusing(t *testing.T) {
	p := Refusing(t)
	_, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	_, err = net.Listen("tcp", p.Addr())
	require.ErrorIs(t, err, syscall.EADDRINUSE, "the port is held")

	ln, err := p.Listen()
	require.NoError(t, err)
	assert.Equal(t, p.Addr(), ln.Addr().String())
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	require.NoError(t, err)
	c.Close()
	require.NoError(t, <-accepted)
	_, err = p.Listen()
	assert.Error(t, err, "once")
}

// Free tries another port when the one it gave was taken before start
// bound it, and returns start's other errors as they are.
func TestFree(t *testing.T) {
	var tried []string
	err := Free(t, func(addr string) error {
		tried = append(tried, addr)
		if len(tried) == 1 { // another socket takes it first
			taker, err := net.Listen("tcp", addr)
			require.NoError(t, err)
			t.Cleanup(func() { taker.Close() })
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		return ln.Close()
	})
	require.NoError(t, err)
	require.Len(t, tried, 2)
	assert.NotEqual(t, tried[0], tried[1])

	calls := 0
	err = Free(t, func(string) error { calls++; return syscall.EACCES })
	assert.ErrorIs(t, err, syscall.EACCES)
	assert.Equal(t, 1, calls)
}
