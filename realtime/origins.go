package realtime

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"streamgate/auth"
)

// origins are the upstream's HA origins, asked with a signed HEAD /
// (discover) when first needed and again after a discovery that failed.
// Safe for concurrent use: the manager asks for them, and so does the
// sharing's tick (the budget of its layout).
type origins struct {
	cfg     *Config // the hub's, read only
	httpURL string  // http(s)://host[:port]/ for HEAD /
	log     *zap.Logger
	ctx     context.Context // the hub's

	mu       sync.Mutex
	list     []string
	resolved bool
	// A discovery that failed (no answer, or not 200) is asked again at
	// rediscoverAt, after rediscoverWait, doubled each time up to a minute,
	// rather than leaving the hub without origins for its whole life.
	rediscoverAt   time.Time
	rediscoverWait time.Duration
}

// get returns the origins each chunk connects to ("" without HA),
// discovering them first if they are not known yet or a failed
// discovery's wait has passed; ok is false, and nothing is asked, while
// they are not known yet unless discover.
func (o *origins) get(discover bool) (list []string, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.resolved && !discover {
		return nil, false
	}
	if !o.resolved || (!o.rediscoverAt.IsZero() && !time.Now().Before(o.rediscoverAt)) {
		found, ok := o.discover()
		o.list, o.resolved = found, true
		o.rediscoverAt = time.Time{}
		if !ok {
			o.rediscoverWait = min(max(2*o.rediscoverWait, time.Second), time.Minute)
			// Jittered, so that replicas started together do not ask
			// together again.
			o.rediscoverAt = time.Now().Add(o.rediscoverWait/2 + rand.N(o.rediscoverWait/2))
		}
	}
	list = o.list
	if len(list) == 0 {
		list = []string{""}
	}
	if len(list) > o.cfg.MaxConnections {
		list = list[:o.cfg.MaxConnections]
	}
	return list, true
}

// discover asks the upstream, with a signed HEAD /, for its HA origins.
// Without the header, or on failure, there is none: one connection per
// chunk. ok is false when the upstream did not answer 200 (then it is
// asked again later).
func (o *origins) discover() (origins []string, ok bool) {
	ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, o.httpURL, nil)
	if err != nil {
		o.log.Warn("origin discovery", zap.Error(err))
		return nil, false
	}
	if o.cfg.DiscoveryBudget != nil {
		if err := o.cfg.DiscoveryBudget(ctx); err != nil {
			o.log.Info("origin discovery waits for the upstream budget: one connection per chunk until it is asked again", zap.Error(err))
			return nil, false
		}
	}
	auth.Sign(req, o.cfg.APIKey, o.cfg.Secret, o.cfg.Clock.Now())
	resp, err := o.cfg.HTTPClient.Do(req)
	if err != nil {
		o.log.Warn("origin discovery failed: one connection per chunk until it is asked again", zap.Error(err))
		return nil, false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		o.log.Warn("origin discovery refused: one connection per chunk until it is asked again", zap.Int("status", resp.StatusCode))
		return nil, false
	}
	origins = parseOrigins(resp.Header.Get(headerAvailableOrigins))
	o.log.Info("upstream origins", zap.Strings("origins", origins))
	return origins, true
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
