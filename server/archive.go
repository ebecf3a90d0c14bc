package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"streamgate/archive"
	"streamgate/config"
	"streamgate/feedid"
	"streamgate/internal/apierror"
	"streamgate/proxy"
	"streamgate/status"
)

// The archive (config archive): the server opens its store (Pebble at
// once, refusing to start when the directory is another process's;
// PostgreSQL in the background, trying again until it answers, the
// gateway going without meanwhile), puts a Writer in front of it, hands
// both to the gateway (proxy.Archive), deletes what retention ends every
// minute, and at the end stops the gateway's use, writes what is queued
// (within a bound) and closes the store.

// archiveInterval is how often retention runs and the store's size is
// measured.
const archiveInterval = time.Minute

// archiveRun is the archive of a running server.
type archiveRun struct {
	tier    *proxy.Archive
	metrics *archive.Metrics
	log     *zap.Logger
	now     func() time.Time
	cfg     config.Archive

	stop context.CancelFunc
	done chan struct{}

	mu     sync.Mutex
	store  archive.Store   // nil until open
	writer *archive.Writer // nil until open
	onOpen []func(archive.Store, *archive.Writer)

	admin     atomic.Pointer[archive.Admin] // the operator endpoints, once open
	fillsStop context.CancelFunc            // nil: no fills running
	fillsDone chan struct{}

	holeMetrics *archive.HoleMetrics
	holes       atomic.Pointer[archive.HoleFiller] // the holes before the stream's new chains, filled; once open
}

// chainStarted is the Writer's OnChain: the hole before the stream's new
// chain of claims is looked for once the fills run.
func (a *archiveRun) chainStarted(network string, stream feedid.ID, from uint32) {
	if h := a.holes.Load(); h != nil {
		h.ChainStarted(network, stream, from)
	}
}

// whenOpen calls f with the store and its writer once the store is open:
// at once when it is, else when it opens (PostgreSQL in the background).
func (a *archiveRun) whenOpen(f func(archive.Store, *archive.Writer)) {
	a.mu.Lock()
	if a.store == nil {
		a.onOpen = append(a.onOpen, f)
		a.mu.Unlock()
		return
	}
	store, w := a.store, a.writer
	a.mu.Unlock()
	f(store, w)
}

// serveFills runs the operator's fills (archive.Filler, one job at a
// time, fetching through pages: the gateway's page path within the fill
// share) and the fills of the holes before the stream's new chains
// (archive.HoleFiller) once the store is open, and serves the archive's
// operator endpoints (archive.Admin) for networks.
func (a *archiveRun) serveFills(pages archive.PageSource, networks []string) {
	ctx, cancel := context.WithCancel(context.Background())
	a.fillsStop, a.fillsDone = cancel, make(chan struct{})
	a.whenOpen(func(store archive.Store, _ *archive.Writer) {
		var f *archive.Filler
		var h *archive.HoleFiller
		if jobs, ok := store.(archive.JobStore); ok {
			f = archive.NewFiller(store, jobs, pages, archive.FillerOptions{Logger: a.log, Now: a.now,
				OnDone: func(p archive.FillProgress) { h.JobDone(p) }})
			h = archive.NewHoleFiller(store, f, a.cfg.Retention, a.now, a.log, a.holeMetrics)
		}
		a.admin.Store(&archive.Admin{Store: store, Filler: f, Networks: networks, Retention: a.cfg.Retention, Now: a.now})
		if f == nil {
			close(a.fillsDone)
			return
		}
		a.holes.Store(h)
		go func() {
			defer close(a.fillsDone)
			holesDone := make(chan struct{})
			go func() {
				defer close(holesDone)
				h.Run(ctx)
			}()
			f.Run(ctx)
			<-holesDone
		}()
	})
}

// state is the status page's view of the archive: its backend, whether it
// is open, and the fills with their progress; nil when it is off.
func (a *archiveRun) state() *status.ArchiveState {
	if a == nil {
		return nil
	}
	st := &status.ArchiveState{Backend: string(a.cfg.Backend), Open: a.current() != nil}
	if h := a.admin.Load(); h != nil && h.Filler != nil {
		for _, p := range h.Filler.Progress() {
			st.Fills = append(st.Fills, status.ArchiveFill{ID: p.ID, Network: p.Network, FeedID: string(p.Stream),
				From: p.From, To: p.To, State: p.State, Covered: p.Covered, Seconds: p.Seconds(),
				Pages: p.Pages, Reports: p.Reports, Error: p.Error})
		}
	}
	return st
}

// adminHandler serves the archive's operator endpoints; 503 while the
// archive is off or not open yet.
func (a *archiveRun) adminHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var h *archive.Admin
		if a != nil {
			h = a.admin.Load()
		}
		if h == nil {
			apierror.Write(w, http.StatusServiceUnavailable, "this gateway has no archive open (archive.backend)", 0)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// startArchive opens cfg's archive, or returns nil when it is off. A
// Pebble directory that cannot be opened (held by another process, not
// writable) is an error: the server does not start.
func startArchive(s *assembly, cfg *config.Config, now func() time.Time) (*archiveRun, error) {
	ac := cfg.Archive
	if ac.Backend == config.ArchiveBackendOff {
		return nil, nil
	}
	if now == nil {
		now = time.Now
	}
	m, err := archive.NewMetrics(s.reg)
	if err != nil {
		return nil, err
	}
	hm, err := archive.NewHoleMetrics(s.reg)
	if err != nil {
		return nil, err
	}
	log := s.log.Named("archive")
	a := &archiveRun{
		tier:    &proxy.Archive{Retention: ac.Retention, ReadTimeout: ac.ReadTimeout, Logger: log},
		metrics: m, log: log, now: now, cfg: ac, done: make(chan struct{}), holeMetrics: hm,
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.stop = cancel
	switch ac.Backend {
	case config.ArchiveBackendPebble:
		dir := cfg.ArchivePath()
		p, err := archive.OpenPebble(archive.PebbleOptions{Dir: dir, Metrics: m, Logger: log})
		if err != nil {
			cancel()
			if errors.Is(err, archive.ErrInUse) {
				return nil, fmt.Errorf("archive.path: %s is in use by another streamgate process (Pebble's LOCK file is held): give each gateway a directory of its own, or use backend postgres for a fleet", dir)
			}
			return nil, fmt.Errorf("archive.path: %w", err)
		}
		a.opened(p)
		log.Info("archive open", zap.String("backend", "pebble"), zap.String("path", dir))
	case config.ArchiveBackendPostgres:
		a.tier.Waiting("connecting to PostgreSQL")
	}
	go a.run(ctx, ac, m)
	return a, nil
}

// opened puts a Writer in front of the open store and hands both to the
// gateway.
func (a *archiveRun) opened(store archive.Store) {
	w := archive.NewWriter(store, archive.WriterOptions{Queue: a.cfg.Queue, Metrics: a.metrics, Logger: a.log,
		OnChain: a.chainStarted})
	a.mu.Lock()
	a.store, a.writer = store, w
	hooks := a.onOpen
	a.onOpen = nil
	a.mu.Unlock()
	a.tier.Open(store, w)
	for _, f := range hooks {
		f(store, w)
	}
}

// run opens a PostgreSQL store until it answers, then deletes what
// retention ends and measures the store, every archiveInterval, until
// ctx ends.
func (a *archiveRun) run(ctx context.Context, ac config.Archive, m *archive.Metrics) {
	defer close(a.done)
	for attempt := 0; a.current() == nil; attempt++ {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		p, err := archive.OpenPostgres(octx, archive.PostgresOptions{URL: ac.Postgres.URL,
			Password: ac.Postgres.Password.Reveal(), Metrics: m})
		cancel()
		if err == nil {
			a.opened(p)
			a.log.Info("archive open", zap.String("backend", "postgres"), zap.Int("attempts", attempt+1))
			break
		}
		if ctx.Err() != nil {
			return
		}
		a.tier.Waiting("PostgreSQL: " + archive.ErrorKind(err))
		if attempt == 0 {
			a.log.Warn("archive: PostgreSQL cannot be opened; the gateway serves without the archive and tries again",
				zap.Error(err)) // OpenPostgres keeps the password out of its errors
		}
		d := min(time.Second<<min(attempt, 5), 30*time.Second)
		t := time.NewTimer(d/2 + rand.N(d/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	tick := time.NewTicker(archiveInterval)
	defer tick.Stop()
	for {
		a.maintain(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (a *archiveRun) current() archive.Store {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.store
}

// maintain deletes what retention ends and measures the store.
func (a *archiveRun) maintain(ctx context.Context) {
	store := a.current()
	if store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, archiveInterval/2)
	defer cancel()
	if r := a.cfg.Retention; r > 0 {
		cutoff := a.now().Add(-r).Unix()
		if cutoff > 0 {
			d, err := store.DeleteBefore(ctx, uint32(min(cutoff, 1<<32-1)))
			switch {
			case err != nil:
				a.log.Warn("archive: retention failed; tried again in a minute", zap.Error(err))
			case d.Reports > 0:
				a.log.Info("archive: retention deleted reports", zap.Int64("reports", d.Reports), zap.Int64("spans", d.Spans))
			}
		}
	}
	_, _ = store.Stats(ctx) // the gauges
}

// degraded says what is wrong with the archive, for /readyz; nil when
// nothing is (or it is off).
func (a *archiveRun) degraded() []string {
	if a == nil {
		return nil
	}
	if h := a.tier.Health(); h != "" {
		return []string{h}
	}
	return nil
}

// gatewayTier is what the gateway serves from; nil when off.
func (a *archiveRun) gatewayTier() *proxy.Archive {
	if a == nil {
		return nil
	}
	return a.tier
}

// archiveCloseTimeout bounds the writing of what is queued at the end.
const archiveCloseTimeout = 10 * time.Second

// close stops the gateway's use of the archive, writes what is queued
// (within archiveCloseTimeout), and closes the store; a store whose
// writes did not end in time is left open for the process's exit.
func (a *archiveRun) close() {
	if a == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), archiveCloseTimeout)
	defer cancel()
	a.stop()
	<-a.done
	if a.fillsStop != nil {
		a.fillsStop()
		a.mu.Lock()
		started := a.onOpen == nil // the hook ran: a runner was started or closed its done
		a.mu.Unlock()
		if started {
			<-a.fillsDone
		}
	}
	a.tier.Detach()
	a.mu.Lock()
	store, w := a.store, a.writer
	a.store, a.writer = nil, nil
	a.mu.Unlock()
	if w != nil {
		if err := w.Close(ctx); err != nil {
			a.log.Warn("archive: reports still queued at the end were not written", zap.Error(err))
			return
		}
	}
	if store != nil {
		if err := store.Close(); err != nil {
			a.log.Warn("archive: closing the store", zap.Error(err))
		}
	}
}

// FlushArchive returns once every report queued for the archive before it
// was written (or dropped), or when ctx ends; at once when the archive is
// off or not open.
func (s *Server) FlushArchive(ctx context.Context) error {
	if s.arch == nil {
		return nil
	}
	s.arch.mu.Lock()
	w := s.arch.writer
	s.arch.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.Flush(ctx)
}

// ArchiveHealth says what is wrong with the archive now ("" when nothing
// is, or it is off): what /readyz adds to "degraded: ".
func (s *Server) ArchiveHealth() string {
	if d := s.arch.degraded(); len(d) > 0 {
		return d[0]
	}
	return ""
}
