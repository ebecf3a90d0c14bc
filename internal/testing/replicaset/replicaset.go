// Package replicaset starts gateways in this process, built by server.New
// as the binary builds them, in front of the simulated upstream: one or N
// replicas of one configuration, sharing a Redis (limits and the cache
// tier) when one is given. The load tool's scenarios and the tests that
// run a gateway or several (server/servertest) start theirs here.
//
// Nothing here needs a testing.T: errors are returned and everything
// started has a Close. The gateway as a process of the built binary is
// internal/testing/fleet's; its simulator is started here too (Upstream).
package replicaset

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"streamgate/config"
	"streamgate/internal/testing/simupstream"
	"streamgate/server"
)

// The simulated upstream is internal/testing/simupstream's; these names
// keep the replica set's callers short.
type (
	Upstream       = simupstream.Upstream
	UpstreamConfig = simupstream.UpstreamConfig
)

// StartUpstream starts the simulator on loopback (simupstream.StartUpstream).
func StartUpstream(c UpstreamConfig) (*Upstream, error) { return simupstream.StartUpstream(c) }

// ShareRedis makes cfg keep its limits and its cache tier in the Redis of
// rt (simupstream.ShareRedis).
func ShareRedis(cfg *config.Config, rt config.RedisTarget) { simupstream.ShareRedis(cfg, rt) }

// Config is a replica set to start.
type Config struct {
	UpstreamConfig
	// Upstream, if not nil, is the upstream the replicas are put in front
	// of (UpstreamConfig is then ignored): sets started one after the
	// other may share one. Close leaves it running.
	Upstream *Upstream
	// Replicas is how many gateways Start starts; Add starts more.
	Replicas int
	// WS gives the replicas the upstream's WebSocket (the real-time hub).
	WS bool
	// Redis, when not nil, is the Redis the replicas keep their limits
	// and their cache tier in (ShareRedis).
	Redis *config.RedisTarget
	// Gateway changes the configuration of replica i (counting every
	// replica started, Add's too, from 0): config.Default() pointed at the
	// upstream u (Upstream.Configure), sharing Redis if given. The result
	// must be valid.
	Gateway func(u *Upstream, i int, cfg *config.Config)
	// SkipValidate gives server.New the configuration unchecked (it must
	// be valid, but a test may want to see what New does with one that
	// is not); by default Add refuses an invalid one.
	SkipValidate bool
	// Options are the server.Options of replica i (logger, registry,
	// clock, limits); nil: none, nothing is logged.
	Options func(i int) server.Options
	// Warm bounds the wait for each replica's catalog warm-up at start
	// (server.Warmed); a replica not warmed by then is an error. Zero: no
	// wait.
	Warm time.Duration
}

// Replica is one gateway of a Set.
type Replica struct {
	Server *server.Server
	Config *config.Config
}

// Base is the base URL of network at r: https:// when the network has a
// tls block.
func (r *Replica) Base(network string) string {
	if n := r.Config.Networks[network]; n != nil && n.TLS != nil {
		return "https://" + r.Server.Addr(network)
	}
	return "http://" + r.Server.Addr(network)
}

// Set is the upstream and the gateways in front of it.
type Set struct {
	*Upstream
	cfg   Config
	ownUp bool // Close closes Upstream

	mu       sync.Mutex
	started  int        // replicas started, Add's too
	replicas []*Replica // in start order; Close closes those still here
}

// Start starts the upstream of c (unless c gives one) and c.Replicas
// gateways in front of it.
func Start(c Config) (_ *Set, err error) {
	s := &Set{Upstream: c.Upstream, cfg: c}
	if s.Upstream == nil {
		if s.Upstream, err = StartUpstream(c.UpstreamConfig); err != nil {
			return nil, err
		}
		s.ownUp = true
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	for range c.Replicas {
		if _, err := s.Add(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Add starts one more replica and returns it once started (and warmed,
// if Config.Warm says so).
func (s *Set) Add() (*Replica, error) {
	s.mu.Lock()
	i := s.started
	s.started++
	s.mu.Unlock()
	cfg := config.Default()
	s.Upstream.Configure(cfg, s.cfg.WS)
	if s.cfg.Redis != nil {
		ShareRedis(cfg, *s.cfg.Redis)
	}
	if s.cfg.Gateway != nil {
		s.cfg.Gateway(s.Upstream, i, cfg)
	}
	if !s.cfg.SkipValidate {
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("replicaset: replica configuration: %w", err)
		}
	}
	var opts server.Options
	if s.cfg.Options != nil {
		opts = s.cfg.Options(i)
	}
	srv, err := server.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("replicaset: gateway: %w", err)
	}
	srv.Start()
	r := &Replica{Server: srv, Config: cfg}
	s.mu.Lock()
	s.replicas = append(s.replicas, r)
	s.mu.Unlock()
	if s.cfg.Warm > 0 {
		t := time.NewTimer(s.cfg.Warm)
		defer t.Stop()
		select {
		case <-srv.Warmed():
		case <-t.C:
			return nil, fmt.Errorf("replicaset: catalog warm-up did not end within %v", s.cfg.Warm)
		}
	}
	return r, nil
}

// Replicas returns the replicas in the set, in start order.
func (s *Set) Replicas() []*Replica {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.replicas)
}

// Remove takes r out of the set, without stopping it: the caller stops it
// (Shutdown, to drain it, or Close).
func (s *Set) Remove(r *Replica) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.replicas, r)
	if i < 0 {
		return errors.New("replicaset: not a replica of the set")
	}
	s.replicas = slices.Delete(s.replicas, i, i+1)
	return nil
}

// Bases returns network's base URL at each replica, in start order.
func (s *Set) Bases(network string) []string {
	var out []string
	for _, r := range s.Replicas() {
		out = append(out, r.Base(network))
	}
	return out
}

// Close closes the replicas, the last started first, then the upstream if
// Start started it.
func (s *Set) Close() {
	s.mu.Lock()
	reps := s.replicas
	s.replicas = nil
	s.mu.Unlock()
	for _, r := range slices.Backward(reps) {
		r.Server.Close()
	}
	if s.ownUp {
		s.Upstream.Close()
	}
}
