// Package wsupgrade is the one check of whether an HTTP request asks for a
// WebSocket, shared by the gateway's endpoint and the simulated upstream.
package wsupgrade

import (
	"net/http"
	"strings"
)

// Requested reports whether r asks for a WebSocket upgrade: a Connection
// header with the token "upgrade" and an Upgrade header with the token
// "websocket", in any case, in any position of a comma-separated list.
func Requested(r *http.Request) bool {
	return hasToken(r.Header, "Connection", "upgrade") && hasToken(r.Header, "Upgrade", "websocket")
}

func hasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}
