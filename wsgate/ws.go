package wsgate

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/apierror"
	"streamgate/internal/wsupgrade"
	"streamgate/ratelimit"
	"streamgate/realtime"
)

// wsSettings are the client side of the WebSocket stream (realtime.* of the
// configuration).
type wsSettings struct {
	queue        int           // frames that may wait for one client
	pingInterval time.Duration // the gateway pings its clients this often
	teamConns    int           // connections one team may hold at once
	// origins are the HA origins advertised to clients (HEAD /) and
	// accepted in X-Cll-Origin; originsHV is the header's value, "" when
	// none is advertised.
	origins   []string
	originsHV string
}

// newWSSettings returns the client side's settings; origins are
// realtime.client_origins.
func newWSSettings(queue int, pingInterval time.Duration, teamConns int, origins []string) wsSettings {
	s := wsSettings{queue: queue, pingInterval: pingInterval, teamConns: teamConns, origins: slices.Clone(origins)}
	if len(origins) > 0 {
		s.originsHV = "{" + strings.Join(origins, ",") + "}"
	}
	return s
}

// The headers of HA origin discovery, as the upstream and the SDKs name
// them.
const (
	headerAvailableOrigins = "X-Cll-Available-Origins"
	headerOrigin           = "X-Cll-Origin"
)

// clientOrigin returns the HA origin an upgrade names (X-Cll-Origin), ""
// for none; an origin that is not advertised is a 400. Without origins
// advertised the header is ignored, as the upstream without HA does.
func (s *wsSettings) clientOrigin(r *http.Request) (string, error) {
	o := r.Header.Get(headerOrigin)
	if o == "" || len(s.origins) == 0 {
		return "", nil
	}
	if !slices.Contains(s.origins, o) {
		return "", apierror.New(http.StatusBadRequest, "unknown origin in "+headerOrigin+": this gateway's origins are "+s.originsHV+" (HEAD / lists them)")
	}
	return o, nil
}

// wsWriteTimeout bounds the write of one frame to a client; a client that
// cannot take a frame in that time is gone or hopelessly slow.
const wsWriteTimeout = 10 * time.Second

// teamConns counts the WebSocket connections each team holds, on every
// network of the gateway together (across the replicas with the Redis
// limits: Config.Conns), and holds every open client, so that a reload can
// check each again (recheck).
type teamConns struct {
	counter Conns
	mu      sync.Mutex
	clients map[*wsClient]struct{}
	idle    chan struct{} // closed when the last client is removed; nil: none waits
}

// wsEndWait bounds how long Gate.Close waits for the stream clients'
// handlers to finish (their close handshake, their resume record).
const wsEndWait = wsCloseWait + time.Second

// wait waits for the handlers of the open clients to finish, within
// wsEndWait.
func (tc *teamConns) wait() {
	tc.mu.Lock()
	if len(tc.clients) == 0 {
		tc.mu.Unlock()
		return
	}
	if tc.idle == nil {
		tc.idle = make(chan struct{})
	}
	idle := tc.idle
	tc.mu.Unlock()
	t := time.NewTimer(wsEndWait)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// acquire takes one of the team's limit connections; release gives it
// back.
func (tc *teamConns) acquire(ctx context.Context, team string, limit int) (release func(), ok bool) {
	return tc.counter.Acquire(ctx, ratelimit.TeamRateKey(team), limit)
}

func (tc *teamConns) add(c *wsClient) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.clients == nil {
		tc.clients = map[*wsClient]struct{}{}
	}
	tc.clients[c] = struct{}{}
}

func (tc *teamConns) remove(c *wsClient) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.clients, c)
	if len(tc.clients) == 0 && tc.idle != nil {
		close(tc.idle)
		tc.idle = nil
	}
}

// recheck checks every open client against the key store its network's
// REST has in force, which a reload has just swapped (see
// wsClient.recheck).
func (tc *teamConns) recheck() {
	tc.mu.Lock()
	clients := make([]*wsClient, 0, len(tc.clients))
	for c := range tc.clients {
		clients = append(clients, c)
	}
	tc.mu.Unlock()
	for _, c := range clients {
		c.recheck(c.rest.Keys())
	}
}

// wsClient is an open client connection as a reload sees it: who opened
// it, how, on which network, and its subscription.
type wsClient struct {
	network string
	team    string
	keyID   string
	origin  string // the HA origin it named; "" none
	mark    *resumeMark
	// ctl wakes the connection's writer for something other than a
	// frame: the read loop ended, a ping is due, the drain (draining) or
	// a revocation (revoked). One channel for them all keeps the writer's
	// wait a select of two, as a bare fan-out's is (serveStream).
	ctl chan struct{}
	// draining asks the writer to close the connection (1001): the
	// gateway shuts down (DrainStreams).
	draining atomic.Bool
	upgrade  *http.Request // the signed upgrade request; alive as long as the handler
	sub      *realtime.Subscription
	feeds    []feedid.ID // the streams still sent; owned by recheck's caller (one reload at a time)
	// revoked is the reason the connection must close (1008), set once.
	revoked atomic.Pointer[string]
	dropped func(n int) // counts streams stopped by a reload
	rest    REST        // its network's, for the keys in force
}

// Reasons a reload closes an open connection (1008, policy violation).
const (
	reasonTeamGone    = "revoked: the team is no longer configured"
	reasonKeyGone     = "revoked: the key is no longer configured"
	reasonKeyMoved    = "revoked: the key now belongs to another team"
	reasonSecretGone  = "revoked: the key's secret that signed this connection was removed"
	reasonNetworkGone = "revoked: the team may no longer use this network"
	reasonNoStream    = "revoked: none of this connection's streams is permitted any more"
	reasonCertGone    = "revoked: the key is now bound to a client certificate this connection did not present"
)

// stillSigns reports whether the upgrade request r still verifies under
// p's secrets, in either form authenticate accepts (the target sent, or
// /api/v1/ws? and the raw query).
func stillSigns(p *auth.Principal, r *http.Request) bool {
	return p.StillSigns(r) || p.StillSigns(AltTarget(r))
}

// recheck applies a reload to the connection: a team or key gone, moved,
// or whose secret no longer verifies the upgrade, or a network the team
// may no longer use, closes it with 1008 and the reason; a stream the team
// may no longer read stops at once (its frames already queued are not
// sent either), and the connection goes on with the others, or closes
// when none is left. The entitlement against the credential's catalog is
// not asked again: a reload does not change the catalog.
func (c *wsClient) recheck(keys *auth.KeyStore) {
	reason := ""
	p, ok := keys.Lookup(c.upgrade.Header.Get(auth.HeaderAuthorization))
	switch _, teamOK := keys.Team(c.team); {
	case !teamOK:
		reason = reasonTeamGone
	case !ok:
		reason = reasonKeyGone
	case p.Team.Name != c.team:
		reason = reasonKeyMoved
	case !stillSigns(p, c.upgrade):
		reason = reasonSecretGone
	case !p.Team.UsesNetwork(c.network):
		reason = reasonNetworkGone
	case !p.Cert.Matches(c.upgrade.TLS):
		reason = reasonCertGone
	}
	if reason == "" {
		var gone, kept []feedid.ID
		for _, id := range c.feeds {
			if p.Team.MayRead(id) {
				kept = append(kept, id)
			} else {
				gone = append(gone, id)
			}
		}
		if len(gone) > 0 {
			c.feeds = kept
			c.dropped(len(gone))
			if c.sub.Drop(gone...) == 0 {
				reason = reasonNoStream
			}
		}
	}
	if reason != "" && c.revoked.CompareAndSwap(nil, &reason) {
		signal(c.ctl)
	}
}

var (
	errNoStream   = &apierror.Error{Status: http.StatusServiceUnavailable, Msg: "real-time streaming is not configured for this network: the gateway's operator sets networks.<name>.upstream.ws_url", RetryAfter: time.Minute}
	errTeamConns  = &apierror.Error{Status: http.StatusTooManyRequests, Msg: "too many WebSocket connections for this team: close one first (realtime.team_connections)", RetryAfter: 5 * time.Second}
	errWSBudget   = &apierror.Error{Status: http.StatusServiceUnavailable, Msg: "the gateway's upstream stream connections are full: these streams cannot be carried now (networks.<name>.upstream.ws_max_connections, ws_feeds_per_connection)", RetryAfter: 30 * time.Second}
	errNotUpgrade = apierror.New(http.StatusUpgradeRequired, "this endpoint is a WebSocket: send Connection: Upgrade and Upgrade: websocket")
)

// serveWS terminates a client's WebSocket at /api/v1/ws?feedIDs=…: every
// stream well-formed (400), readable by the team and known to its
// credential's catalog and to the organisation's, whose connections carry it
// (401 for any one that is not), the team under its connection limit (429),
// an audit line with the streams; then the client is subscribed to the
// network's hub and gets each report of its streams as the upstream sent it,
// in one binary frame, exactly once. Nothing goes upstream for a refused
// client, and no client is ever passed through to the upstream one to one.
// The streams and their entitlement are the network's REST's to check
// (REST.ReadStreams).
func (n *Network) serveWS(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if len(n.hubs) == 0 {
		writeError(w, errNoStream)
		return
	}
	origin, err := n.ws.clientOrigin(r)
	if err != nil {
		writeError(w, err)
		return
	}
	since, err := n.since.read(r)
	if err != nil {
		writeError(w, err)
		return
	}
	feeds, ok := n.rest.ReadStreams(w, r, p)
	if !ok {
		return
	}
	// The hub of the team's stream partition: the network's, or with
	// sharing: credential its own credential's. Its resume records are
	// the partition's too (label).
	part := n.rest.Partition(p)
	hub, label := n.hubs[part], config.PartitionLabel(n.name, part)
	if hub == nil {
		writeError(w, errNoStream)
		return
	}
	if since > 0 {
		if err := n.since.fits(since, len(feeds)); err != nil {
			writeError(w, err)
			return
		}
	}
	if !wsupgrade.Requested(r) {
		writeError(w, errNotUpgrade)
		return
	}
	team := p.Team.Name
	release, ok := n.conns.acquire(r.Context(), team, n.ws.teamConns)
	if !ok {
		n.metrics.wsRefused(n.name, "team_limit")
		writeError(w, errTeamConns)
		return
	}
	defer release()
	// A client that comes back within realtime.resume_window gets what it
	// missed first (wsresume.go).
	var resumeAs string
	var from map[string]int64
	var unread bool // the record could not be read: from is a window before now
	if n.resume != nil {
		resumeAs = resumeID(label, r.Header.Get(auth.HeaderAuthorization), origin, feeds)
		if since == 0 {
			from, unread = n.resume.load(r.Context(), resumeAs, feeds)
		}
	}
	var reach time.Duration
	if since > 0 {
		// The client's since outranks its resume record (endpoint.go).
		from, reach = sinceMarks(since, feeds), n.since.max
	}
	// Subscribed before the upgrade: a client whose streams the upstream
	// budget cannot carry is told so (503), not left without frames.
	var charge realtime.FillCharge
	if len(from) > 0 {
		charge = n.resumeCharge(team)
	}
	sub, err := hub.Subscribe(feeds, realtime.SubscribeOptions{Queue: n.ws.queue, From: watermarks(from), Within: true, Charge: charge, Since: reach})
	if err != nil {
		n.metrics.wsRefused(n.name, "upstream_budget")
		writeError(w, errWSBudget)
		return
	}
	defer sub.Close()
	conn, rw, _, err := ws.HTTPUpgrader{Timeout: wsWriteTimeout}.Upgrade(r, w)
	if err != nil {
		if conn != nil {
			conn.Close() // the upgrader has answered the client
		}
		return
	}
	defer conn.Close()
	upgraded(r.Context(), len(feeds), from != nil)
	n.metrics.wsClient(n.name, origin, 1)
	defer n.metrics.wsClient(n.name, origin, -1)

	wc := &wsClient{network: n.name, team: team, keyID: r.Header.Get(auth.HeaderAuthorization), origin: origin,
		upgrade: r, sub: sub, feeds: slices.Clone(feeds), ctl: make(chan struct{}, 1),
		dropped: func(k int) { n.metrics.wsStreamsStopped(n.name, k) }}
	wc.rest = n.rest
	if n.resume != nil {
		var missed func(int64)
		if unread {
			n.metrics.resumeUnread(n.name)
			missed = hub.Unfilled
		}
		wc.mark = n.resume.track(team, resumeAs, from, missed)
	}
	n.conns.add(wc)
	defer n.conns.remove(wc)
	var closed string // why the connection ended (serveStream)
	if wc.mark != nil {
		// A connection this replica's shutdown closed (its drain, or its
		// hub closing) leaves a record outside the bounds (resumeIndex).
		defer func() {
			n.resume.end(wc.mark, wc.mark.closedByClient.Load(), closed == "drain" || closed == "shutdown")
		}()
	}
	// A reload between the policy this request was checked under and the
	// registration above would have missed it: check it once now.
	wc.recheck(n.rest.Keys())
	closed = n.serveStream(conn, rw.Reader, sub, wc, wantsDecoded(r))
	n.metrics.wsClosed(n.name, closed)
}

// serveRoot answers GET and HEAD / itself: the SDKs send a signed HEAD / to
// their WebSocket address to discover HA origins (X-Cll-Available-Origins).
// The gateway advertises its own (realtime.client_origins), never the
// upstream's, when the network streams: an SDK in HA mode then holds one
// connection per origin, as it does to the upstream, and behind a
// balancer the two usually land on two replicas. Every origin carries
// every stream. An X-Cll-Origin not among them is a 400, as on the
// upgrade. Nothing goes upstream.
func (n *Network) serveRoot(w http.ResponseWriter, r *http.Request, _ *auth.Principal) {
	w.Header().Set("Cache-Control", "no-store")
	if len(n.hubs) > 0 && n.ws.originsHV != "" {
		if _, err := n.ws.clientOrigin(r); err != nil {
			writeError(w, err)
			return
		}
		w.Header().Set(headerAvailableOrigins, n.ws.originsHV)
	}
	w.WriteHeader(http.StatusOK)
}
