//go:build !linux

package upstreamsim

import (
	"net"
	"sync/atomic"
)

// arrivalConn records receive times on Linux only; elsewhere none is
// made, and the handlers count their Now.
type arrivalConn struct {
	net.Conn
	last atomic.Int64
}

func newArrivalConn(net.Conn) *arrivalConn { return nil }

func stampArrivals(net.Listener) {}
