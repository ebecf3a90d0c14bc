package proxy

import (
	"log"
	"net"
	"net/http"
	"sort"
	"strings"

	"streamgate/config"
)

// Listener is one address to listen on and what it serves.
type Listener struct {
	Addr     string   // the configured listen address
	Networks []string // the networks served there, sorted
	Handler  http.Handler
}

// Listeners returns the listeners to open, sorted by address. Networks that
// share a listen address share a listener, where requests are routed by
// their Host name; a network on port 0 (any free port) has a listener of
// its own, since a free port is never shared.
func (g *Gateway) Listeners() []Listener {
	var out []Listener
	byAddr := map[string][]string{}
	for _, name := range g.Networks() {
		addr := g.networks[name].listen
		if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
			out = append(out, Listener{Addr: addr, Networks: []string{name}, Handler: g.networks[name].handler})
			continue
		}
		byAddr[addr] = append(byAddr[addr], name)
	}
	for addr, names := range byAddr {
		l := Listener{Addr: addr, Networks: names, Handler: g.networks[names[0]].handler}
		if len(names) > 1 {
			hosts := map[string]http.Handler{}
			for _, name := range names {
				for _, h := range g.networks[name].hosts {
					hosts[strings.ToLower(h)] = g.networks[name].handler
				}
			}
			l.Handler = hostRouter(hosts, g.unknownHost)
		}
		out = append(out, l)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// hostRouter routes by the request's Host name, port removed.
func hostRouter(hosts map[string]http.Handler, unknown http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if h, ok := hosts[strings.ToLower(host)]; ok {
			h.ServeHTTP(w, r)
			return
		}
		unknown.ServeHTTP(w, r)
	})
}

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
