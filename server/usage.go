package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/config"
	"streamgate/internal/apierror"
	"streamgate/usage"
)

// usageCloseTimeout bounds the ledger's last flush at shutdown.
const usageCloseTimeout = 5 * time.Second

// usageLedger builds and starts the usage ledger: in the limits' Redis
// (else the shared cache tier's) when the gateway has one, shared by every
// replica and kept across restarts; else in this process.
func (b *build) usageLedger() error {
	s := b
	cfg := usage.Config{Now: b.opts.Now, Logger: s.log.Named("usage")}
	var rc redis.UniversalClient
	switch {
	case s.limits != nil && s.limits.Redis() != nil:
		rc = s.limits.Redis()
	case s.sharedRC != nil:
		rc = s.sharedRC
	}
	var l *usage.Ledger
	if rc != nil {
		l = usage.NewRedis(rc, "", cfg)
	} else {
		l = usage.NewMemory(cfg)
	}
	l.Start()
	b.usage = l
	return nil
}

// closeUsage stops the ledger's flusher and writes what is left, while
// its Redis client is still open.
func (s *assembly) closeUsage() {
	if s.usage == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), usageCloseTimeout)
	defer cancel()
	s.usage.Close(ctx)
}

// Usage returns the usage ledger.
func (s *assembly) Usage() *usage.Ledger { return s.usage }

// usageAnswer is the body of /usage.json.
type usageAnswer struct {
	From string `json:"from"`
	To   string `json:"to"`
	Team string `json:"team,omitempty"`
	// Shared says whether the figures are the fleet's (Redis: every
	// replica's, kept across restarts) or this process's alone.
	Shared bool        `json:"shared"`
	Rows   []usage.Row `json:"rows"`
}

// serveUsage answers GET /usage.json?from=YYYY-MM-DD&to=YYYY-MM-DD&team=NAME:
// the ledger's rows of those UTC days (both included; from and to default
// to today, from to to), of team when given. A bad parameter is a 400.
func (s *Server) serveUsage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "from", "to", "team":
			if len(v) > 1 {
				apierror.Write(w, http.StatusBadRequest, "parameter "+k+" is given more than once", 0)
				return
			}
		default:
			apierror.Write(w, http.StatusBadRequest, "unknown parameter "+quoteParam(k)+": /usage.json takes from, to and team", 0)
			return
		}
	}
	today := s.usage.Day()
	from, to := today, today
	var err error
	if v := q.Get("from"); v != "" {
		if from, err = usage.ParseDay(v); err != nil {
			apierror.Write(w, http.StatusBadRequest, "from: "+err.Error(), 0)
			return
		}
		if to = today; from.After(today) { // from alone: through today
			to = from
		}
	}
	if v := q.Get("to"); v != "" {
		if to, err = usage.ParseDay(v); err != nil {
			apierror.Write(w, http.StatusBadRequest, "to: "+err.Error(), 0)
			return
		}
		if q.Get("from") == "" {
			from = to
		}
	}
	if to.Before(from) {
		apierror.Write(w, http.StatusBadRequest, "to is before from", 0)
		return
	}
	if days := int(to.Sub(from)/(24*time.Hour)) + 1; days > usage.MaxDays {
		apierror.Write(w, http.StatusBadRequest, "at most 401 days at once (the ledger keeps 400 days after each day's end)", 0)
		return
	}
	team := q.Get("team")
	if _, has := q["team"]; has && !knownTeam(s.cfg.Load(), team) {
		apierror.Write(w, http.StatusBadRequest, "team: no team named "+quoteParam(team)+" is configured", 0)
		return
	}
	rows, err := s.usage.Read(r.Context(), from, to, team)
	if err != nil {
		s.log.Warn("usage.json: the ledger could not be read", zap.Error(err))
		apierror.Write(w, http.StatusServiceUnavailable, "the usage ledger cannot be read now (its Redis is unavailable)", 5*time.Second)
		return
	}
	if rows == nil {
		rows = []usage.Row{}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(usageAnswer{From: from.Format(usage.DayLayout), To: to.Format(usage.DayLayout), Team: team,
		Shared: s.usage.Shared(), Rows: rows})
}

// knownTeam says whether name is a team of cfg.
func knownTeam(cfg *config.Config, name string) bool {
	for _, t := range cfg.Teams {
		if t.Name == name {
			return true
		}
	}
	return false
}

// quoteParam quotes a client's text for an error message, cut to 64 bytes.
func quoteParam(v string) string {
	if len(v) > 64 {
		v = v[:64] + "…"
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// usageReadTimeout bounds the status sampler's read of today's figures.
const usageReadTimeout = time.Second

// usageToday returns today's figures (UTC) per team in ledger, every
// network summed, for the status page: the fleet's with Redis, this
// replica's without; nil when the ledger cannot be read now. The status
// sampler calls it once per sample (statusFacts), one read of one hash.
func usageToday(ledger *usage.Ledger) map[string]usage.Row {
	ctx, cancel := context.WithTimeout(context.Background(), usageReadTimeout)
	defer cancel()
	rows, err := ledger.Today(ctx)
	if err != nil {
		return nil
	}
	out := map[string]usage.Row{}
	for _, r := range rows {
		t := out[r.Team]
		t.Day, t.Team = r.Day, r.Team
		t.Requests += r.Requests
		t.Reports += r.Reports
		t.Frames += r.Frames
		t.UpstreamCalls += r.UpstreamCalls
		t.RESTBytes += r.RESTBytes
		t.StreamBytes += r.StreamBytes
		t.Bytes += r.Bytes
		out[r.Team] = t
	}
	return out
}
