package proxy

import (
	"log"
	"net/http"

	"streamgate/config"
)

// maxHeaderBytes bounds a request's line and headers: a bulk request of
// 1000 streams is about 68 KB of request line.
const maxHeaderBytes = 128 << 10

// NewServer returns the http.Server of one listener of the gateway (a
// network's or the admin's) with the configured timeouts: a request must
// arrive within server.read_header_timeout (headers) and
// server.read_timeout (whole), and be answered within
// server.write_timeout; idle keep-alive connections are closed after
// server.idle_timeout. Upgraded WebSocket connections are bound by none of
// them (net/http clears the deadlines of a hijacked connection).
func NewServer(h http.Handler, s config.Server, errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.ReadHeaderTimeout,
		ReadTimeout:       s.ReadTimeout,
		WriteTimeout:      s.WriteTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
	}
}
