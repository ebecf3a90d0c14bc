// Package server assembles a whole streamgate from a configuration: the
// embedded upstream when the configuration asks for one (in builds that
// carry it, embedded.go), the cache, the limits (in memory or Redis), the
// metrics, the gateway, and its listeners with the admin endpoints; and
// the loggers the binary passes it (logs.go). It owns everything it
// starts: New builds and binds, Start serves, Reload applies a new
// configuration, Shutdown drains and releases. The binary, the load tool
// and the tests all build their gateway with it, so what is tested and
// measured is what ships.
//
// The package is in two halves. What BUILDS a gateway: the assembly, the
// parts it holds and releases (assembly.go), and New's steps, one function
// per part, run in order (build.go), with the report verification
// (verify.go), the TLS listeners (tls.go), the limits (limits.go) and the
// shared cache tier (shared.go) they make. What RUNS it: the Server, which
// holds the assembly and the state of running it (this file), Start and the
// drain (run.go), Reload (reload.go), and the admin endpoints (admin.go).
package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"streamgate/config"
	"streamgate/status"
)

// Options are a Server's dependencies besides its configuration. Every
// field may be left zero.
type Options struct {
	// Logger receives the process's logs. Nil: nothing is logged.
	Logger *zap.Logger
	// AccessLog receives one line per request. Nil: Logger.
	AccessLog *zap.Logger
	// Registry receives the metrics; /metrics serves it. Nil: a new one.
	Registry *prometheus.Registry
	// Now is the clock of the cache, the gateway, the team quotas and the
	// real-time hubs' signatures and reports (the upstream budget and the
	// hubs' connection timers always follow the wall clock). Nil:
	// time.Now.
	Now func() time.Time
	// Limits, if non-nil, are used instead of the ones the configuration's
	// ratelimit section describes; the Server does not close them.
	Limits *Limits
	// Version is shown on the status page. Empty: "dev".
	Version string
	// StatusInterval is how often the status page's sampler gathers the
	// metrics. Zero: status.DefaultInterval.
	StatusInterval time.Duration
}

// Server is a running gateway: the parts New assembled (the embedded
// assembly, whose accessors Addr, Gateway, Cache, Registry, Hub, Gate,
// Status and Simulator are the Server's) and the state of running them.
// Its methods are safe for concurrent use.
type Server struct {
	*assembly

	cfg      atomic.Pointer[config.Config] // in force
	loadedAt atomic.Pointer[time.Time]     // when the configuration in force was loaded
	reloaded atomic.Pointer[status.Reload] // the last reload's outcome

	draining atomic.Bool
	started  atomic.Bool
	warmStop context.CancelFunc
	warmDone chan struct{}
	once     sync.Once
	closeErr error
}

// New builds the gateway cfg describes (cfg must be valid: config.Load and
// config.Parse validate) and binds every listener, so that Addr answers
// before Start. It does not change cfg. On error, whatever it had started
// is released. The parts are built in the order of build.steps.
func New(cfg *config.Config, opts Options) (_ *Server, err error) {
	a := newAssembly(opts)
	if err := CheckBuild(cfg); err != nil {
		return nil, err
	}
	s := &Server{assembly: a, warmDone: make(chan struct{})}
	s.cfg.Store(cfg)
	defer func() {
		if err != nil {
			a.release()
		}
	}()
	b := newBuild(s, cfg, opts)
	for _, step := range b.steps() {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// embedded is the upstream of the networks whose upstream.url is
// "embedded": the simulator (embedded.go), left out of builds with the tag
// nosimulator (embedded_none.go).
type embedded interface {
	handler(network string) http.Handler
	credentials() (key, secret string)
	dons(network string) []config.DON // the DON configurations it signs with
	close()
}

// errNoEmbedded is CheckBuild's problem in a build without the simulator.
var errNoEmbedded = errors.New("this build leaves out the embedded upstream (built with -tags nosimulator): give the upstream's URL")

// CheckBuild returns what of cfg this build cannot run, or nil: a network
// whose upstream is "embedded", in a build without the embedded upstream
// (EmbeddedUpstream false). New refuses such a configuration; check
// reports it.
func CheckBuild(cfg *config.Config) error { return checkBuild(cfg, EmbeddedUpstream) }

func checkBuild(cfg *config.Config, embeddable bool) error {
	if embeddable {
		return nil
	}
	var errs []error
	for _, name := range cfg.NetworkNames() {
		if cfg.Networks[name].Upstream.Embedded() {
			errs = append(errs, fmt.Errorf("networks.%s.upstream.url: %q: %w", name, config.EmbeddedURL, errNoEmbedded))
		}
	}
	return errors.Join(errs...)
}
