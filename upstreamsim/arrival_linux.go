package upstreamsim

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// arrivalConn is a TCP connection that reads with recvmsg and keeps the
// kernel's receive time of the last bytes read (SO_TIMESTAMPNS_NEW), in
// Unix nanoseconds.
type arrivalConn struct {
	net.Conn
	raw  syscall.RawConn
	last atomic.Int64
	oob  []byte // read by one Read at a time (net/http, a WebSocket)
}

// stampArrivals asks the kernel to time what l's connections receive
// from the moment they are made, before they are accepted (the option is
// inherited): a request sent before a busy process accepted its
// connection has its receive time too. Without it (not TCP, an older
// kernel) each connection asks when accepted.
func stampArrivals(l net.Listener) {
	if tl, ok := l.(*net.TCPListener); ok {
		if raw, err := tl.SyscallConn(); err == nil {
			_ = setStamp(raw)
		}
	}
}

// setStamp sets SO_TIMESTAMPNS_NEW on raw's socket.
func setStamp(raw syscall.RawConn) error {
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS_NEW, 1)
	}); err != nil {
		return err
	}
	return serr
}

// newArrivalConn returns c recording receive times, or nil when it
// cannot (not TCP, or a kernel without the option).
func newArrivalConn(c net.Conn) *arrivalConn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tc.SyscallConn()
	if err != nil || setStamp(raw) != nil {
		return nil
	}
	return &arrivalConn{Conn: c, raw: raw, oob: make([]byte, unix.CmsgSpace(16))}
}

// Read reads like the TCP connection's Read (its deadlines hold) and
// records the receive time that comes with the bytes.
func (c *arrivalConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n, oobn int
	var rerr error
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, rerr = unix.Recvmsg(int(fd), p, c.oob, 0)
			if rerr != unix.EINTR {
				break
			}
		}
		return rerr != unix.EAGAIN
	})
	if err == nil && rerr != nil {
		err = os.NewSyscallError("recvmsg", rerr)
	}
	if err != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	}
	if n == 0 {
		return 0, io.EOF
	}
	if at := receiveTime(c.oob[:oobn]); at > 0 {
		c.last.Store(at)
	}
	return n, nil
}

// CloseWrite shuts down the writing side, as net/http does before closing
// a connection it answered with an error.
func (c *arrivalConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// receiveTime finds the SO_TIMESTAMPNS_NEW time (a __kernel_timespec) in
// the control messages oob, in Unix nanoseconds; 0 if there is none.
func receiveTime(oob []byte) int64 {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SO_TIMESTAMPNS_NEW && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return sec*1e9 + nsec
		}
	}
	return 0
}
