// Package wsgate is the gateway's WebSocket endpoint for clients
// (/api/v1/ws): it admits an upgrade (the team's connection limit, the
// upstream budget of its streams through the network's hub), holds the
// client's connection (frames in batches, pings, a reload's recheck),
// keeps its resume record so that a client that comes back gets what it
// missed, and drains the clients in steps when the replica shuts down.
//
// What the REST side decides (the upgrade's signature, its streams and
// their entitlement, a resumed fill's charge to the team's quota) it asks
// of the network's REST, given to Gate.Network with the network's
// real-time hub, which carries the streams.
package wsgate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"streamgate/auth"
	"streamgate/don"
	"streamgate/feedid"
	"streamgate/internal/apierror"
	"streamgate/realtime"
)

// Config is what a Gate is built with.
type Config struct {
	// Gates are the DON gates by network name, for the decoded view of
	// the frames; a network without one decodes without verification.
	Gates map[string]*don.Gate
	// Queue is how many frames may wait for one client
	// (realtime.client_queue).
	Queue int
	// PingInterval is how often the gateway pings a client; a client that
	// has not answered the previous ping is closed
	// (realtime.ping_interval).
	PingInterval time.Duration
	// TeamConnections is how many connections one team may hold at once,
	// on every network together (realtime.team_connections).
	TeamConnections int
	// Origins are the HA origins advertised to clients (HEAD /) and
	// accepted in X-Cll-Origin (realtime.client_origins); none: no HA.
	Origins []string
	// ResumeWindow is how long a client's watermarks are kept for its
	// return (realtime.resume_window); 0: no resume.
	ResumeWindow time.Duration
	// ResumeRecordsPerTeam and ResumeRecords bound the resume records this
	// replica writes (realtime.resume_records_per_team, resume_records).
	ResumeRecordsPerTeam, ResumeRecords int
	// ResumeRedis, if non-nil, shares the resume records with the other
	// replicas, so that a client resumes on any of them; nil: each
	// replica keeps its own.
	ResumeRedis redis.UniversalClient
	// Conns counts each team's connections; nil: this process counts
	// alone.
	Conns Conns
	// Metrics records the endpoint's metrics; nil: none.
	Metrics *Metrics
	// Usage, if non-nil, counts each team's frames for the usage ledger.
	Usage FrameCounter
	// Logger receives the drain's and the resume store's lines; nil:
	// nothing is logged.
	Logger *zap.Logger
	// Now is the clock of the resume windows and of since; nil: time.Now.
	Now func() time.Time
	// SinceMax bounds how far back an upgrade's since may ask
	// (realtime.since_max); 0 refuses every since.
	SinceMax time.Duration
	// SinceRetention is the archive's retention when the gateway keeps
	// one (archive.retention): a since older is refused; 0: no bound.
	SinceRetention time.Duration
}

// Gate is the WebSocket endpoint of every network of the gateway: the
// team connection counts, the open clients and the resume records are the
// gateway's, shared by its networks. The server builds it, gives it to the
// gateway, which routes each network's upgrades to Network's handlers and
// calls Recheck on a reload, and at shutdown drains it (DrainStreams)
// and closes it. It is safe for concurrent use.
type Gate struct {
	cfg     Config
	conns   *teamConns
	resume  *resumeStore // nil: no resume
	metrics *Metrics
	log     *zap.Logger
	now     func() time.Time
}

// New returns the Gate of cfg, or every problem of cfg.
func New(cfg Config) (*Gate, error) {
	var errs []error
	if cfg.Queue <= 0 {
		errs = append(errs, errors.New("wsgate: Config.Queue must be at least 1"))
	}
	if cfg.PingInterval <= 0 {
		errs = append(errs, errors.New("wsgate: Config.PingInterval must be above zero"))
	}
	if cfg.TeamConnections <= 0 {
		errs = append(errs, errors.New("wsgate: Config.TeamConnections must be at least 1"))
	}
	if cfg.ResumeWindow > 0 && (cfg.ResumeRecordsPerTeam <= 0 || cfg.ResumeRecords < cfg.ResumeRecordsPerTeam) {
		errs = append(errs, errors.New("wsgate: Config.ResumeRecordsPerTeam must be at least 1 and ResumeRecords at least as many"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	g := &Gate{cfg: cfg, conns: &teamConns{counter: cfg.Conns}, metrics: cfg.Metrics, log: cfg.Logger, now: cfg.Now}
	if g.log == nil {
		g.log = zap.NewNop()
	}
	if g.conns.counter == nil {
		g.conns.counter = &MemoryConns{}
	}
	if g.now == nil {
		g.now = time.Now
	}
	now := g.now
	if cfg.ResumeWindow > 0 { // its flusher starts with the first client
		g.resume = newResumeStore(cfg.ResumeWindow, cfg.ResumeRecordsPerTeam, cfg.ResumeRecords,
			cfg.ResumeRedis, g.log, now, g.metrics)
	}
	return g, nil
}

// REST is what the endpoint asks of the REST side of one network (proxy's
// network implements it): the endpoint reads no query, holds no key and
// counts no quota of its own.
type REST interface {
	// ReadStreams reads an upgrade's streams (feedIDs) and checks that the
	// team may read each and that its credential's catalog and the
	// organisation's hold it; on a refusal it has answered w and ok is
	// false. Nothing goes upstream for a refused client.
	ReadStreams(w http.ResponseWriter, r *http.Request, p *auth.Principal) (feeds []feedid.ID, ok bool)
	// Keys returns the key store in force (a reload swaps it).
	Keys() *auth.KeyStore
	// Charge returns what a resumed client's fill costs team.
	Charge(team string) realtime.FillCharge
	// Partition returns the stream partition p's team is served from: ""
	// for the network's own (every team with sharing: organisation), else
	// that of the team's own upstream credential (sharing: credential).
	Partition(p *auth.Principal) string
}

// Network is the endpoint of one network: ServeWS and ServeRoot, called
// by the gateway's chain once the upgrade is authenticated and admitted. A
// nil *Network answers as a network without a stream. It is safe for
// concurrent use.
type Network struct {
	name    string
	hubs    map[string]*realtime.Hub // by stream partition (REST.Partition); none: no stream for this network
	gate    *don.Gate
	ws      wsSettings
	conns   *teamConns
	resume  *resumeStore
	metrics *Metrics
	rest    REST
	usage   FrameCounter // nil: no ledger
	since   sinceBounds
}

// resumeCharge is what a resumed client's fill costs team (REST.Charge).
func (n *Network) resumeCharge(team string) realtime.FillCharge { return n.rest.Charge(team) }

// noStream is the endpoint of a network without a stream.
var noStream = &Network{}

// ServeWS serves an upgrade to /api/v1/ws (serveWS); a nil Network, or one
// without a hub, refuses it with 503.
func (n *Network) ServeWS(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if n == nil {
		n = noStream
	}
	n.serveWS(w, r, p)
}

// ServeRoot answers GET and HEAD / (serveRoot): the HA origins of a
// network that streams.
func (n *Network) ServeRoot(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	if n == nil {
		n = noStream
	}
	n.serveRoot(w, r, p)
}

// Network returns the endpoint of network name on the real-time hubs of
// its stream partitions, by partition name ("" the network's own; with
// sharing: credential one per upstream credential): a client is served by
// its team's partition's hub (REST.Partition), and refused with 503 when
// that has none (none at all: the network does not stream). rest checks
// its upgrades. nil for a nil Gate.
func (g *Gate) Network(name string, hubs map[string]*realtime.Hub, rest REST) *Network {
	if g == nil {
		return nil
	}
	c := g.cfg
	return &Network{name: name, hubs: hubs, gate: c.Gates[name], rest: rest,
		ws:    newWSSettings(c.Queue, c.PingInterval, c.TeamConnections, c.Origins),
		conns: g.conns, resume: g.resume, metrics: g.metrics, usage: c.Usage,
		since: sinceBounds{max: c.SinceMax, retention: c.SinceRetention, now: g.now}}
}

// Recheck checks every open client against the configuration a reload has
// just put in force (see wsClient.recheck).
func (g *Gate) Recheck() {
	if g != nil {
		g.conns.recheck()
	}
}

// Close waits for the handlers of the open clients to finish (within
// wsEndWait), then stops the resume store after its last write.
func (g *Gate) Close() {
	if g == nil {
		return
	}
	g.conns.wait()
	if g.resume != nil {
		g.resume.close()
	}
}

// AltTarget returns r as signed by the clients that sign a WebSocket
// upgrade as /api/v1/ws? and the raw query, whatever target they send:
// the second form authentication accepts for the ws route.
func AltTarget(r *http.Request) *http.Request {
	alt := *r
	alt.RequestURI = "/api/v1/ws?" + r.URL.RawQuery
	return &alt
}

// wantsDecoded reports whether the client asked for the decoded view
// (Accept: application/vnd.streamgate.decoded+json).
func wantsDecoded(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), don.DecodedMediaType)
}

// upgraded notes a WebSocket upgrade on the request's server span, which
// lasts as long as the connection.
func upgraded(ctx context.Context, streams int, resumed bool) {
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		sp.AddEvent("websocket upgraded", trace.WithAttributes(
			attribute.Int("streamgate.streams", streams), attribute.Bool("streamgate.resumed", resumed)))
	}
}

// writeError answers err, one of the endpoint's refusals, as the API
// answers every error.
func writeError(w http.ResponseWriter, err error) {
	var ae *apierror.Error
	if !errors.As(err, &ae) {
		ae = apierror.New(http.StatusInternalServerError, "internal error")
	}
	apierror.Write(w, ae.Status, ae.Msg, ae.RetryAfter)
}

// since: /api/v1/ws?feedIDs=…&since=UNIX_SECONDS, an extension of the
// gateway's that the SDKs never send. The client gets every report of its
// streams from since on, in order, each once, as the live stream sends
// them, then live ones: the hub serves it as a resume from since - 1 for
// every stream (realtime.SubscribeOptions.From), from its history, the
// archive, and the upstream's fills for the rest, charged as a resume's
// fill is. A since outranks the client's resume record: it is what the
// client asked for; the record goes on from there for its next
// connection.

// sinceBounds are the bounds of an upgrade's since.
type sinceBounds struct {
	max       time.Duration // realtime.since_max; 0 refuses every since
	retention time.Duration // archive.retention; 0: none
	now       func() time.Time
}

// maxSinceReports bounds the reports one since may ask for, every stream
// together: half the replay a subscription may hold (realtime.MaxReplay),
// the other half for the live frames that arrive while it is read.
const maxSinceReports = realtime.MaxReplay / 2

// read returns the since of r (0 when it has none), or a 400 naming its
// bounds: whole Unix seconds, not in the future, no further back than
// realtime.since_max nor than the archive's retention.
func (b sinceBounds) read(r *http.Request) (int64, error) {
	vals, ok := r.URL.Query()["since"]
	if !ok {
		return 0, nil
	}
	now := b.now().Unix()
	oldest := now - int64(b.max/time.Second)
	bounds := func() string {
		s := fmt.Sprintf("since must be whole Unix seconds from %d to %d (now; at most realtime.since_max, %s, back", oldest, now, b.max)
		if b.retention > 0 {
			s += fmt.Sprintf(", and within the archive's retention, %s", b.retention)
		}
		return s + ")"
	}
	if b.max <= 0 {
		return 0, apierror.New(http.StatusBadRequest, "since is not enabled on this gateway (realtime.since_max is 0)")
	}
	if len(vals) != 1 {
		return 0, apierror.New(http.StatusBadRequest, "since given more than once: "+bounds())
	}
	since, err := strconv.ParseInt(vals[0], 10, 64)
	switch {
	case err != nil || since <= 0:
		return 0, apierror.New(http.StatusBadRequest, fmt.Sprintf("since %q is not a Unix time in seconds: %s", vals[0], bounds()))
	case since > now:
		return 0, apierror.New(http.StatusBadRequest, fmt.Sprintf("since %d is in the future: %s", since, bounds()))
	case since < oldest:
		return 0, apierror.New(http.StatusBadRequest, fmt.Sprintf("since %d is further back than realtime.since_max allows: %s", since, bounds()))
	case b.retention > 0 && since < b.now().Add(-b.retention).Unix():
		return 0, apierror.New(http.StatusBadRequest, fmt.Sprintf("since %d is older than the archive's retention (archive.retention, %s): %s", since, b.retention, bounds()))
	}
	return since, nil
}

// fits checks that a since of streams asks for at most maxSinceReports
// reports (a 400 naming the bound when not).
func (b sinceBounds) fits(since int64, streams int) error {
	secs := b.now().Unix() - since + 1
	if secs*int64(streams) <= maxSinceReports {
		return nil
	}
	return apierror.New(http.StatusBadRequest, fmt.Sprintf(
		"since %d asks for %d seconds of %d streams: at most %d reports at once (every stream together); ask for fewer streams or a later since",
		since, secs, streams, maxSinceReports))
}

// sinceMarks returns the watermarks of a since: since - 1 for every stream.
func sinceMarks(since int64, feeds []feedid.ID) map[string]int64 {
	marks := make(map[string]int64, len(feeds))
	for _, f := range feeds {
		marks[string(f)] = since - 1
	}
	return marks
}
