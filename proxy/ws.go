package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gobwas/ws"

	"streamgate/auth"
)

// wsSettings are the client side of the WebSocket stream (realtime.* of the
// configuration).
type wsSettings struct {
	queue        int           // frames that may wait for one client
	pingInterval time.Duration // the gateway pings its clients this often
	teamConns    int           // connections one team may hold at once
}

// wsWriteTimeout bounds the write of one frame to a client; a client that
// cannot take a frame in that time is gone or hopelessly slow.
const wsWriteTimeout = 10 * time.Second

// teamConns counts the WebSocket connections each team holds, on every
// network of the gateway together.
type teamConns struct {
	mu sync.Mutex
	n  map[string]int
}

func (tc *teamConns) acquire(team string, limit int) bool {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.n[team] >= limit {
		return false
	}
	tc.n[team]++
	return true
}

func (tc *teamConns) release(team string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.n[team]--; tc.n[team] <= 0 {
		delete(tc.n, team)
	}
}

var (
	errNoStream   = &apiError{status: http.StatusServiceUnavailable, msg: "real-time streaming is not configured for this network: the gateway's operator sets networks.<name>.upstream.ws_url", retryAfter: time.Minute}
	errTeamConns  = &apiError{status: http.StatusTooManyRequests, msg: "too many WebSocket connections for this team: close one first (realtime.team_connections)", retryAfter: 5 * time.Second}
	errNotUpgrade = errorf(http.StatusUpgradeRequired, "this endpoint is a WebSocket: send Connection: Upgrade and Upgrade: websocket")
)

// serveWS terminates a client's WebSocket at /api/v1/ws?feedIDs=…: every
// stream well-formed (400), readable by the team and known to its
// credential's catalog and to the organisation's, whose connections carry it
// (401 for any one that is not), the team under its connection limit (429),
// an audit line with the streams; then the client is subscribed to the
// network's hub and gets each report of its streams as the upstream sent it,
// in one binary frame, exactly once. Nothing goes upstream for a refused
// client, and no client is ever passed through to the upstream one to one.
func (n *network) serveWS(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if n.hub == nil {
		writeError(w, errNoStream)
		return
	}
	rq, ok := n.readQuery(w, r, p, "ws", func(q url.Values, rq *reportQuery) (err error) {
		rq.feeds, err = parseFeedIDs(q)
		return err
	})
	if !ok {
		return
	}
	if rq.cred != n.org {
		// The stream is the organisation's: the streams must exist for
		// its credential too.
		if err := n.entitled(r.Context(), p, n.org, rq.feeds...); err != nil {
			writeError(w, err)
			return
		}
	}
	if !isUpgrade(r) {
		writeError(w, errNotUpgrade)
		return
	}
	team := p.Team.Name
	if !n.conns.acquire(team, n.ws.teamConns) {
		n.metrics.wsRefused(n.name, "team_limit")
		writeError(w, errTeamConns)
		return
	}
	defer n.conns.release(team)
	conn, rw, _, err := ws.HTTPUpgrader{Timeout: wsWriteTimeout}.Upgrade(r, w)
	if err != nil {
		if conn != nil {
			conn.Close() // the upgrader has answered the client
		}
		return
	}
	defer conn.Close()
	n.metrics.wsClient(n.name, 1)
	defer n.metrics.wsClient(n.name, -1)

	sub := n.hub.Subscribe(rq.feeds, n.ws.queue)
	defer sub.Close()
	n.metrics.wsClosed(n.name, n.serveStream(conn, rw.Reader, sub, wantsDecoded(r)))
}

// serveRoot answers GET and HEAD / itself: the SDKs send a signed HEAD / to
// their WebSocket address to discover HA origins (X-Cll-Available-Origins).
// The gateway is one endpoint that already spreads its streams over the
// upstream's origins, so it advertises none, and an SDK in HA mode keeps
// one connection to it. Nothing goes upstream.
func (n *network) serveRoot(w http.ResponseWriter, r *http.Request, _ *auth.Principal) {
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// isUpgrade reports whether r asks for a WebSocket.
func isUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}
