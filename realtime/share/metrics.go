package share

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the sharing's Prometheus metrics, shared by the Sharers of
// every network (each labels its series with its network):
//
//	streamgate_ws_share_sharing{network}                      gauge: 1 while sharing through Redis, 0 while holding its own connections
//	streamgate_ws_share_fallbacks_total{network}              times the replica stopped sharing (Redis down or slow)
//	streamgate_ws_share_chunk_holder{network,chunk}           gauge per chunk of the layout ("n/i"): 1 holder, 0 follower
//	streamgate_ws_share_leases_total{network,event}           event acquired, lost (to another replica), released or reaped (a dead holder's lease freed)
//	streamgate_ws_share_frames_published_total{network}       frames published to the other replicas
//	streamgate_ws_share_frames_received_total{network}        frames received from the other replicas
//	streamgate_ws_share_publish_failed_total{network}         messages not published (queue full or Redis failing)
//	streamgate_ws_share_resubscribed_total{network,reason}    subscriptions to the channel made again: ended (by Redis), refused (an error reply), silent (own presence not heard back)
type Metrics struct {
	sharing   *prometheus.GaugeVec
	fallbacks *prometheus.CounterVec
	holder    *prometheus.GaugeVec
	leases    *prometheus.CounterVec
	published *prometheus.CounterVec
	received  *prometheus.CounterVec
	pubFailed *prometheus.CounterVec
	resubs    *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		sharing: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_ws_share_sharing",
			Help: "1 while the upstream WebSocket connections are shared with the other replicas through Redis, 0 while this replica holds its own."}, []string{"network"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_share_fallbacks_total",
			Help: "Times this replica stopped sharing the stream (Redis down or slow) and held its own upstream connections."}, []string{"network"}),
		holder: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "streamgate_ws_share_chunk_holder",
			Help: "Per shared chunk (n/i): 1 when this replica holds its lease and upstream connection, 0 when it follows."}, []string{"network", "chunk"}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_share_leases_total",
			Help: "Chunk leases acquired, lost to another replica, released, or reaped (the lease of a holder gone from Redis freed for takeover)."}, []string{"network", "event"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_share_frames_published_total",
			Help: "Report frames published to the other replicas through Redis."}, []string{"network"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_share_frames_received_total",
			Help: "Report frames received from the other replicas through Redis."}, []string{"network"}),
		pubFailed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_share_publish_failed_total",
			Help: "Messages (frames, heartbeats) not published: queue full or Redis failing."}, []string{"network"}),
		resubs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "streamgate_ws_share_resubscribed_total",
			Help: "Subscriptions to the sharing channel made again: ended by Redis, refused (an error reply), or silent (this replica's own presence message not heard back)."}, []string{"network", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.sharing, m.fallbacks, m.holder, m.leases, m.published, m.received, m.pubFailed, m.resubs)
	}
	return m
}

// shareMetrics are one Sharer's series.
type shareMetrics struct {
	m       *Metrics
	network string
}

func newShareMetrics(m *Metrics, network string) shareMetrics {
	if m == nil {
		m = NewMetrics(nil) // unregistered: recorded nowhere
	}
	return shareMetrics{m: m, network: network}
}

func (x shareMetrics) mode(sharing bool) {
	v := 0.0
	if sharing {
		v = 1
	}
	x.m.sharing.WithLabelValues(x.network).Set(v)
}

func (x shareMetrics) fallback() { x.m.fallbacks.WithLabelValues(x.network).Inc() }

// chunkRole sets the role of chunk t; "" forgets the chunk.
func (x shareMetrics) chunkRole(t, role string) {
	switch role {
	case "":
		x.m.holder.DeleteLabelValues(x.network, t)
	case RoleHolder:
		x.m.holder.WithLabelValues(x.network, t).Set(1)
	default:
		x.m.holder.WithLabelValues(x.network, t).Set(0)
	}
}

func (x shareMetrics) lease(event string) { x.m.leases.WithLabelValues(x.network, event).Inc() }

func (x shareMetrics) published(n int) {
	x.m.published.WithLabelValues(x.network).Add(float64(n))
}

func (x shareMetrics) resubscribed(reason string) {
	x.m.resubs.WithLabelValues(x.network, reason).Inc()
}

func (x shareMetrics) publishFailed(n int) {
	x.m.pubFailed.WithLabelValues(x.network).Add(float64(n))
}

func (x shareMetrics) received() { x.m.received.WithLabelValues(x.network).Inc() }
