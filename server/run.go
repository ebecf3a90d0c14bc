// This file holds what runs a built gateway: Start, readiness, and the
// drain (Shutdown, Close).

package server

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Start serves every listener and loads each network's catalog in the
// background (tried again until its upstream answers, which makes the
// server ready). It returns at once.
func (s *Server) Start() {
	if !s.started.CompareAndSwap(false, true) {
		return
	}
	for _, sv := range s.upstreams {
		go sv.srv.Serve(sv.ln)
	}
	for _, sv := range s.networks {
		go func() {
			if err := sv.serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("listener stopped", zap.String("addr", sv.ln.Addr().String()), zap.Error(err))
			}
		}()
	}
	s.status.Start()
	if s.admin != nil {
		go s.admin.serve()
		s.log.Info("admin listening", zap.String("addr", s.addrs["admin"]))
	}
	if s.emb != nil {
		s.log.Info("embedded upstream started")
	}
	cfg := s.cfg.Load()
	for _, name := range s.gw.Networks() {
		s.log.Info("serving network", zap.String("network", name), zap.String("listen", s.addrs[name]),
			zap.Strings("hosts", cfg.Networks[name].Hosts), zap.Bool("tls", cfg.Networks[name].TLS != nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.warmStop = cancel
	go func() {
		defer close(s.warmDone)
		s.gw.Warm(ctx)
	}()
}

// Warmed is closed when the background catalog warm-up has ended: every
// network's catalog is loaded (or Shutdown stopped it).
func (s *Server) Warmed() <-chan struct{} { return s.warmDone }

// Run starts the server, serves until ctx ends, then drains within
// server.shutdown_timeout.
func (s *Server) Run(ctx context.Context) error {
	s.Start()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.Load().Server.ShutdownTimeout)
	defer cancel()
	return s.Shutdown(sctx)
}

// Ready reports whether every upstream has answered, the server is not
// draining and it does not refuse every request (fail_mode closed while
// the limits' Redis cannot be used): what /readyz answers.
func (s *Server) Ready() bool { return !s.draining.Load() && s.gw.Ready() && s.refusing() == "" }

// Shutdown drains: /readyz answers 503 at once; the replica goes on
// serving for realtime.drain_delay (when it streams), so that a balancer
// stops routing to it; then the listeners stop accepting and the requests
// in flight are finished (connections still open when ctx ends are
// closed), the stream clients are closed in steps (an HA client's two
// connections never together), the hubs hand over and close, then the
// embedded upstream they may still be calling stops, then the admin
// listener; finally the cache and the limits are released. It returns the
// first error of the drain. Close skips the delay and the steps.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		s.draining.Store(true)
		s.log.Info("draining")
		// Not ready from now on; the stream clients keep streaming for
		// realtime.drain_delay, so that the balancer stops routing to this
		// replica before any of them reconnects.
		s.streamOn(ctx)
		if s.warmStop != nil {
			s.warmStop()
			<-s.warmDone
		}
		err := shutdown(ctx, s.networks)
		if err != nil {
			s.log.Warn("drain incomplete: closing the connections still open", zap.Error(err))
		}
		s.closeStreams(ctx)
		s.gw.Close()
		shutdown(ctx, s.upstreams)
		if s.admin != nil {
			shutdown(ctx, []*served{s.admin})
		}
		s.release()
		s.log.Info("stopped")
		s.closeErr = err
	})
	return s.closeErr
}

// streamOn waits realtime.drain_delay (within the drain's time, drainDelay)
// while the replica is not ready but still streams, when it streams.
func (s *Server) streamOn(ctx context.Context) {
	d := drainDelay(ctx, s.cfg.Load().Realtime.DrainDelay)
	if d <= 0 || len(s.hubs) == 0 || s.gw == nil {
		return
	}
	s.log.Info("streaming on while the balancer lets this replica go", zap.Duration("drain_delay", d))
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
}

// closeStreams closes the stream clients (1001) in steps, an HA client's
// second connection once its first has reconnected
// (wsgate.Gate.DrainStreams); closing the hubs ends the subscriptions of
// any left. A sharing hub first hands its chunks over to another replica
// (within realtime.share_lease): the hubs close together. The status
// sampler, which reads the hubs, stops before them.
func (s *Server) closeStreams(ctx context.Context) {
	if s.streams != nil {
		s.streams.DrainStreams(ctx)
	}
	s.status.Stop()
	var hubs sync.WaitGroup
	for _, h := range s.hubs {
		hubs.Go(h.Close)
	}
	hubs.Wait()
	s.hubs = nil
	s.streams.Close()
}

// drainDelay is realtime.drain_delay within the drain's time: at most half
// of what is left of ctx, so that the listeners and the stream clients
// have the rest.
func drainDelay(ctx context.Context, d time.Duration) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(deadline)/2)
	}
	return d
}

// Close stops at once, without draining.
func (s *Server) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return s.Shutdown(ctx)
}

// shutdown shuts the servers down together, closes those that do not
// finish within ctx, and returns the first error.
func shutdown(ctx context.Context, group []*served) error {
	errs := make([]error, len(group))
	var wg sync.WaitGroup
	for i, sv := range group {
		wg.Go(func() {
			if errs[i] = sv.srv.Shutdown(ctx); errs[i] != nil {
				sv.srv.Close()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
