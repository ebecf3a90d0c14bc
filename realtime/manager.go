package realtime

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"streamgate/auth"
)

// chunk is a set of feeds carried together: one link per origin.
type chunk struct {
	feeds []string // sorted
	links []*link  // by origin
	next  []string // planning
}

// manage reconciles the upstream connections with the wanted feeds, when
// kicked and on a tick (for the grace periods).
func (h *Hub) manage() {
	defer h.wg.Done()
	every := min(max(h.cfg.Grace/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return // the links end with h.ctx
		case <-h.kickCh:
		case <-t.C:
		}
		h.reconcile()
	}
}

// reconcile drops the feeds past their grace, splits the wanted set into
// chunks within the budget and switches the chunks that changed.
func (h *Hub) reconcile() {
	now := time.Now()
	h.mu.Lock()
	dropped := false
	for id, f := range h.wants {
		if f.refs > 0 || f.pinned || now.Sub(f.idleSince) < h.cfg.Grace ||
			(!f.demandAt.IsZero() && now.Sub(f.demandAt) < h.cfg.Grace) {
			continue
		}
		delete(h.wants, id)
		dropped = true
	}
	if dropped {
		h.publishFeeds()
	}
	desired := make(map[string]bool, len(h.wants))
	for id := range h.wants {
		desired[id] = true
	}
	h.mu.Unlock()
	if len(desired) == 0 && len(h.chunks) == 0 {
		return
	}
	if !h.resolved {
		h.origins = h.discover()
		h.resolved = true
	}
	origins := h.origins
	if len(origins) == 0 {
		origins = []string{""}
	}
	if len(origins) > h.cfg.MaxConnections {
		origins = origins[:h.cfg.MaxConnections]
	}
	maxChunks := h.cfg.MaxConnections / len(origins)

	// Keep every chunk's feeds still wanted; fill the room left, then new
	// chunks, with the rest.
	carried := map[string]bool{}
	for _, c := range h.chunks {
		c.next = c.next[:0]
		for _, id := range c.feeds {
			if desired[id] {
				c.next = append(c.next, id)
				carried[id] = true
			}
		}
	}
	var missing []string
	for id := range desired {
		if !carried[id] {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	for _, c := range h.chunks {
		if len(c.next) > 0 || len(missing) > 0 {
			n := min(h.cfg.FeedsPerConnection-len(c.next), len(missing))
			if n > 0 {
				c.next = append(c.next, missing[:n]...)
				missing = missing[n:]
			}
		}
	}
	for len(missing) > 0 && len(h.chunks) < maxChunks {
		n := min(h.cfg.FeedsPerConnection, len(missing))
		h.chunks = append(h.chunks, &chunk{next: slices.Clone(missing[:n])})
		missing = missing[n:]
	}
	if over := int64(len(missing)); over != h.over.Swap(over) && over > 0 {
		h.log.Warn("feeds over the upstream connection budget stay unsubscribed",
			zap.Int64("feeds", over), zap.Int("max_connections", h.cfg.MaxConnections),
			zap.Int("feeds_per_connection", h.cfg.FeedsPerConnection))
	}
	h.mx.uncarried.Set(float64(len(missing)))

	// Switch what changed.
	kept := h.chunks[:0]
	total := 0
	for _, c := range h.chunks {
		slices.Sort(c.next)
		switch {
		case len(c.next) == 0:
			for _, l := range c.links {
				l.retire(nil)
			}
			continue
		case c.links == nil:
			c.feeds = slices.Clone(c.next)
			for _, o := range origins {
				c.links = append(c.links, h.startLink(o, c.feeds))
			}
		case !slices.Equal(c.feeds, c.next):
			c.feeds = slices.Clone(c.next)
			old := c.links
			c.links = nil
			for _, o := range origins {
				c.links = append(c.links, h.startLink(o, c.feeds))
			}
			h.retireAfter(old, c.links)
		}
		total += len(c.feeds)
		kept = append(kept, c)
	}
	clear(h.chunks[len(kept):])
	h.chunks = kept
	h.carry.Store(int64(total))
	h.mx.feeds.Set(float64(total))
}

// retireAfter closes each of old once its successor (same origin) has
// delivered a frame, or after StallTimeout: make-before-break.
func (h *Hub) retireAfter(old, succ []*link) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		ctx, cancel := context.WithTimeout(h.ctx, h.cfg.StallTimeout)
		defer cancel()
		for i, o := range old {
			var s *link
			if i < len(succ) {
				s = succ[i]
				select {
				case <-s.first:
				case <-ctx.Done():
				}
			}
			o.retire(s)
		}
	}()
}

// discover asks the upstream, with a signed HEAD /, for its HA origins.
// Without the header, or on failure, there is none: one connection per
// chunk.
func (h *Hub) discover() []string {
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, h.httpURL, nil)
	if err != nil {
		h.log.Warn("origin discovery", zap.Error(err))
		return nil
	}
	auth.Sign(req, h.cfg.APIKey, h.cfg.Secret, h.cfg.Now())
	resp, err := h.cfg.HTTPClient.Do(req)
	if err != nil {
		h.log.Warn("origin discovery failed: one connection per chunk", zap.Error(err))
		return nil
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		h.log.Warn("origin discovery refused: one connection per chunk", zap.Int("status", resp.StatusCode))
	}
	origins := parseOrigins(resp.Header.Get(headerAvailableOrigins))
	h.log.Info("upstream origins", zap.Strings("origins", origins))
	return origins
}

// parseOrigins reads X-Cll-Available-Origins: {001,002}.
func parseOrigins(v string) []string {
	v = strings.TrimSpace(v)
	v = strings.TrimSuffix(strings.TrimPrefix(v, "{"), "}")
	var out []string
	for o := range strings.SplitSeq(v, ",") {
		if o = strings.TrimSpace(o); o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// reconnected counts a reconnect.
func (h *Hub) reconnected(reason string) {
	switch reason {
	case reasonDrop:
		h.st.reconnDrop.Add(1)
	case reasonStall:
		h.st.reconnStall.Add(1)
	case reasonRefused:
		h.st.reconnRefused.Add(1)
	}
	h.mx.m.reconnects.WithLabelValues(h.cfg.Network, reason).Inc()
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

func (x *hubMetrics) duplicate() {
	x.st.duplicates.Add(1)
	x.duplicates.Inc()
}

func (x *hubMetrics) slowClose() {
	x.st.slowCloses.Add(1)
	x.slowCloses.Inc()
}

// Stats is a snapshot of a hub.
type Stats struct {
	Network string
	Origins []string // the HA origins of the connections held; none without HA
	// Connections are the upstream connections, one per chunk and origin
	// (a make-before-break switch shows both for a moment).
	Connections []ConnStats
	// FeedsWanted are the feeds wanted (subscriptions, pinned, demand, in
	// grace); FeedsSubscribed those carried upstream; FeedsUncarried those
	// over the budget (MaxConnections, FeedsPerConnection).
	FeedsWanted, FeedsSubscribed, FeedsUncarried int
	Subscribers                                  int
	FramesIn, FramesOut                          int64            // read upstream; queued to subscriptions
	Duplicates                                   int64            // dropped by the watermark
	SlowCloses                                   int64            // subscriptions closed with ErrSlowConsumer
	Reconnects                                   map[string]int64 // by reason: drop, stall, refused
	LatestServed                                 int64
}

// ConnStats is one upstream connection.
type ConnStats struct {
	Origin string // "" without HA
	State  string // connecting, up, down
	Feeds  int
}

// Stats returns a snapshot of the hub.
func (h *Hub) Stats() Stats {
	s := Stats{Network: h.cfg.Network,
		FramesIn: h.st.framesIn.Load(), FramesOut: h.st.framesOut.Load(),
		Duplicates: h.st.duplicates.Load(), SlowCloses: h.st.slowCloses.Load(),
		LatestServed: h.st.latestServed.Load(),
		Reconnects: map[string]int64{reasonDrop: h.st.reconnDrop.Load(),
			reasonStall: h.st.reconnStall.Load(), reasonRefused: h.st.reconnRefused.Load()},
		FeedsSubscribed: int(h.carry.Load()), FeedsUncarried: int(h.over.Load()),
	}
	h.mu.Lock()
	s.FeedsWanted, s.Subscribers = len(h.wants), len(h.subs)
	h.mu.Unlock()
	h.linkMu.Lock()
	for l := range h.links {
		if st := l.state.Load(); st != nil {
			s.Connections = append(s.Connections, ConnStats{Origin: l.origin, State: *st, Feeds: len(l.feeds)})
		}
	}
	h.linkMu.Unlock()
	slices.SortFunc(s.Connections, func(a, b ConnStats) int {
		return strings.Compare(a.Origin+a.State, b.Origin+b.State)
	})
	for _, c := range s.Connections {
		if c.Origin != "" && !slices.Contains(s.Origins, c.Origin) {
			s.Origins = append(s.Origins, c.Origin)
		}
	}
	return s
}

// Up returns how many upstream connections are up.
func (s Stats) Up() int {
	n := 0
	for _, c := range s.Connections {
		if c.State == stateUp {
			n++
		}
	}
	return n
}
