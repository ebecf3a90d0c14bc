package realtime

import (
	"github.com/prometheus/client_golang/prometheus"

	"streamgate/realtime/share"
)

// Metrics are the hub's Prometheus metrics, shared by the hubs of every
// network (each hub labels its series with its network). Every name starts
// with streamgate_ws_; the labels are network and bounded ones (origin,
// state, reason).
//
//	streamgate_ws_upstream_connections{network,origin,state}  gauge: state connecting, up or down (waiting to reconnect)
//	streamgate_ws_feeds_subscribed{network}                   gauge: feeds carried by an upstream connection
//	streamgate_ws_feeds_uncarried{network}                    gauge: feeds wanted but over the connection budget
//	streamgate_ws_subscribers{network}                        gauge: open subscriptions
//	streamgate_ws_frames_received_total{network,origin}       report frames read from the upstream
//	streamgate_ws_frames_delivered_total{network}             frames queued to subscriptions (one per subscription)
//	streamgate_ws_duplicates_dropped_total{network}           frames at or below a feed's watermark (HA twins, overlaps)
//	streamgate_ws_slow_consumer_closes_total{network}         subscriptions closed because their queue overflowed
//	streamgate_ws_reconnects_total{network,reason}            reason drop, stall or refused
//	streamgate_ws_latest_served_total{network}                Latest calls answered (ok true); counted by the hub inside Latest
//	streamgate_ws_frames_future_total{network}                frames dropped: observationsTimestamp more than MaxFuture ahead of the clock
//	streamgate_ws_backfilled_seconds_total{network}           (stream, second) pairs of gaps fetched over REST (Config.Backfill)
//	streamgate_ws_gaps_unfilled_total{network}                (stream, second) pairs of gaps that could not be filled (REST failed or had none, beyond BackfillMax)
//	streamgate_ws_resumed_total{network}                      subscriptions that resumed from a watermark (SubscribeOptions.From)
//	streamgate_ws_replayed_reports_total{network}             reports replayed to resumed subscriptions (history and fetched)
//	streamgate_ws_replayed_archive_total{network}             (stream, second) pairs of those replays read from the archive (Config.Archive)
//	streamgate_ws_since_total{network}                        resumed subscriptions that asked for their feeds from a point in time (SubscribeOptions.Since)
//
// With stream sharing (Config.Share), the streamgate_ws_share_ metrics of
// package share, registered with them.
type Metrics struct {
	conns        *prometheus.GaugeVec
	feeds        *prometheus.GaugeVec
	uncarried    *prometheus.GaugeVec
	subscribers  *prometheus.GaugeVec
	framesIn     *prometheus.CounterVec
	framesOut    *prometheus.CounterVec
	duplicates   *prometheus.CounterVec
	slowCloses   *prometheus.CounterVec
	reconnects   *prometheus.CounterVec
	latestServed *prometheus.CounterVec
	future       *prometheus.CounterVec
	backfilled   *prometheus.CounterVec
	unfilled     *prometheus.CounterVec
	resumed      *prometheus.CounterVec
	replayed     *prometheus.CounterVec
	archived     *prometheus.CounterVec
	since        *prometheus.CounterVec

	share *share.Metrics
}

// MetricReconnects is the name of the counter of upstream WebSocket
// reconnects (labels network, reason) that the status page reads (status
// takes it from here: a rename breaks its build, not the page).
const MetricReconnects = "streamgate_ws_reconnects_total"

// MetricGapsUnfilled is the name of the counter of (stream, second) pairs
// of stream gaps that could not be filled (label network), which the
// status page reads.
const MetricGapsUnfilled = "streamgate_ws_gaps_unfilled_total"

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		conns: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_ws_upstream_connections",
			Help: "Upstream WebSocket connections, by origin and state (connecting, up, down)."}, []string{"network", "origin", "state"}),
		feeds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_ws_feeds_subscribed",
			Help: "Feeds carried by the upstream WebSocket connections."}, []string{"network"}),
		uncarried: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_ws_feeds_uncarried",
			Help: "Feeds wanted but not carried: over the upstream connection budget."}, []string{"network"}),
		subscribers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_ws_subscribers",
			Help: "Open subscriptions to the hub."}, []string{"network"}),
		framesIn: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_frames_received_total",
			Help: "Report frames received from the upstream."}, []string{"network", "origin"}),
		framesOut: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_frames_delivered_total",
			Help: "Report frames queued to subscriptions."}, []string{"network"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_duplicates_dropped_total",
			Help: "Report frames dropped as not newer than the feed's watermark."}, []string{"network"}),
		slowCloses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_slow_consumer_closes_total",
			Help: "Subscriptions closed because their queue overflowed."}, []string{"network"}),
		reconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricReconnects,
			Help: "Upstream WebSocket reconnects, by reason (drop, stall, refused)."}, []string{"network", "reason"}),
		latestServed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_latest_served_total",
			Help: "Latest reports answered from the stream."}, []string{"network"}),
		future: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_frames_future_total",
			Help: "Report frames dropped because their observationsTimestamp lies too far ahead of the clock (from the upstream or another replica)."}, []string{"network"}),

		backfilled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_backfilled_seconds_total",
			Help: "(stream, second) pairs of stream gaps fetched over REST and delivered in order, by network."}, []string{"network"}),
		unfilled: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricGapsUnfilled,
			Help: "(stream, second) pairs of stream gaps that could not be filled (REST failed or had no report, or beyond realtime.backfill_max), by network."}, []string{"network"}),
		resumed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_resumed_total",
			Help: "Client subscriptions that resumed where a connection the gateway ended or lost left off, by network."}, []string{"network"}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_replayed_reports_total",
			Help: "Reports replayed to resumed client subscriptions (from the history or fetched), by network."}, []string{"network"}),
		archived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_replayed_archive_total",
			Help: "(stream, second) pairs replayed to resumed client subscriptions that were read from the archive, not fetched from the upstream, by network."}, []string{"network"}),
		since: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_since_total",
			Help: "Client subscriptions that asked for their streams from a point in time (since), by network; each is also counted as resumed."}, []string{"network"}),
		share: share.NewMetrics(reg),
	}
	if reg != nil {
		reg.MustRegister(m.conns, m.feeds, m.uncarried, m.subscribers, m.framesIn, m.framesOut,
			m.duplicates, m.slowCloses, m.reconnects, m.latestServed, m.future,
			m.backfilled, m.unfilled, m.resumed, m.replayed, m.archived, m.since)
	}
	return m
}

// hubMetrics are one hub's series and counters.
type hubMetrics struct {
	m       *Metrics
	network string
	st      *hubCounters

	subscribers, feeds, uncarried                   prometheus.Gauge
	framesOut, duplicates, slowCloses, latestServed prometheus.Counter
}

func newHubMetrics(m *Metrics, network string, st *hubCounters) hubMetrics {
	if m == nil {
		m = NewMetrics(nil) // unregistered: recorded nowhere
	}
	return hubMetrics{m: m, network: network, st: st,
		subscribers:  m.subscribers.WithLabelValues(network),
		feeds:        m.feeds.WithLabelValues(network),
		uncarried:    m.uncarried.WithLabelValues(network),
		framesOut:    m.framesOut.WithLabelValues(network),
		duplicates:   m.duplicates.WithLabelValues(network),
		slowCloses:   m.slowCloses.WithLabelValues(network),
		latestServed: m.latestServed.WithLabelValues(network),
	}
}

func originLabel(o string) string {
	if o == "" {
		return "none"
	}
	return o
}

func (x *hubMetrics) conns(origin, state string) prometheus.Gauge {
	return x.m.conns.WithLabelValues(x.network, originLabel(origin), state)
}

func (x *hubMetrics) frameIn(origin string) {
	x.st.framesIn.Add(1)
	x.m.framesIn.WithLabelValues(x.network, originLabel(origin)).Inc()
}

func (x *hubMetrics) delivered(n int) {
	if n > 0 {
		x.st.framesOut.Add(int64(n))
		x.framesOut.Add(float64(n))
	}
}

// fannedOut counts n frames queued, and releases the subscriptions that
// overflowed (slow), counting each. Called without any feed's lock.
func (x *hubMetrics) fannedOut(n int, slow []*Subscription) {
	x.delivered(n)
	for _, s := range slow {
		x.slowClose()
		s.release()
	}
}

func (x *hubMetrics) duplicate() {
	x.st.duplicates.Add(1)
	x.duplicates.Inc()
}

func (x *hubMetrics) backfilled(n int64) {
	if n > 0 {
		x.st.backfilled.Add(n)
		x.m.backfilled.WithLabelValues(x.network).Add(float64(n))
	}
}

func (x *hubMetrics) unfilled(n int64) {
	if n > 0 {
		x.st.unfilled.Add(n)
		x.m.unfilled.WithLabelValues(x.network).Add(float64(n))
	}
}

func (x *hubMetrics) resumed() {
	x.st.resumed.Add(1)
	x.m.resumed.WithLabelValues(x.network).Inc()
}

func (x *hubMetrics) replayed(n int) {
	if n > 0 {
		x.st.replayed.Add(int64(n))
		x.m.replayed.WithLabelValues(x.network).Add(float64(n))
	}
}

func (x *hubMetrics) archiveReplayed(n int64) {
	if n > 0 {
		x.m.archived.WithLabelValues(x.network).Add(float64(n))
	}
}

func (x *hubMetrics) since() {
	x.m.since.WithLabelValues(x.network).Inc()
}

func (x *hubMetrics) slowClose() {
	x.st.slowCloses.Add(1)
	x.slowCloses.Inc()
}

// Unfilled counts n (stream, second) pairs that a consumer may have
// missed and that no fill of the hub could reach
// (streamgate_ws_gaps_unfilled_total, Stats.Unfilled): the endpoint's
// account of a client resumed without its watermarks (Redis away), once
// they could be read.
func (h *Hub) Unfilled(n int64) { h.mx.unfilled(n) }
