// Package fleet runs a deployment of streamgate as an operator runs one,
// for the process tests, the SDK compatibility tests and the load tool:
// gateway replicas (processes of the built binary) in front of the
// simulator, behind a readiness-aware balancer, sharing a Redis; replicas
// replaced or killed as deploys and crashes do; and counting stream
// clients that reconnect as the SDKs do and count every (stream, second)
// they receive: missing, repeated, out of order.
//
// Nothing here needs a testing.T: errors are returned, logs go to a sink
// the caller gives, and everything started has a Close or Stop. The
// simulator is served as internal/testing/replicaset serves it to the
// gateways it runs in-process.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"streamgate/internal/testing/balancer"
	"streamgate/internal/testing/simupstream"
	"streamgate/upstreamsim"
)

// Network is the network the fleet's replicas serve and the simulator
// publishes.
const Network = upstreamsim.Mainnet

// Config is a fleet to start.
type Config struct {
	Binary string // the streamgate binary
	// Dir is where each replica's configuration is written, a directory
	// of its own per replica; it must exist.
	Dir      string
	Replicas int // started by Start
	// Simulator is the upstream's configuration (nil: upstreamsim.Default(),
	// 10 requests per second per key and endpoint).
	Simulator *upstreamsim.Config
	// Gateway makes a replica's configuration (YAML) from the upstream's
	// base URL; the network Network must listen on a free port and the
	// admin listener must be on.
	Gateway func(upstream string) string
	// Log, when not nil, receives every line of every replica's log.
	Log func(pid int, line string)
	// Started, when not nil, is called with each replica once it serves,
	// before it is routed to.
	Started func(*Proc)
	// ReadyTimeout bounds a replica's start until the balancer routes to
	// it (default 30s).
	ReadyTimeout time.Duration
}

// Fleet is the simulator as upstream, the replicas and the balancer in
// front of them. Its methods are safe for concurrent use, but replacing
// two replicas at once is the caller's to avoid.
type Fleet struct {
	Sim      *upstreamsim.Simulator
	Upstream string             // the simulator's base URL
	Balancer *balancer.Balancer // the replicas' one address, as a Service's

	cfg      Config
	gateway  string // the replicas' configuration
	upstream *simupstream.Upstream

	mu   sync.Mutex
	reps []*Proc
}

// Start starts the simulator, the balancer and cfg.Replicas replicas, and
// returns when the balancer routes to each of them.
func Start(cfg Config) (_ *Fleet, err error) {
	if cfg.Binary == "" || cfg.Dir == "" || cfg.Gateway == nil {
		return nil, errors.New("fleet: Binary, Dir and Gateway are required")
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	simCfg := upstreamsim.Default()
	if cfg.Simulator != nil {
		simCfg = *cfg.Simulator
	}
	sim, err := upstreamsim.New(simCfg)
	if err != nil {
		return nil, fmt.Errorf("fleet: simulator: %w", err)
	}
	f := &Fleet{Sim: sim, cfg: cfg}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if f.upstream, err = simupstream.StartUpstream(simupstream.UpstreamConfig{Sim: sim, Networks: []string{Network}}); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.Upstream = f.upstream.URL[Network]
	f.gateway = cfg.Gateway(f.Upstream)
	if f.Balancer, err = balancer.Listen("127.0.0.1:0", balancer.Options{Interval: 100 * time.Millisecond}); err != nil {
		return nil, fmt.Errorf("fleet: balancer: %w", err)
	}
	for range cfg.Replicas {
		p, err := f.StartReplica()
		if err != nil {
			return nil, err
		}
		f.mu.Lock()
		f.reps = append(f.reps, p)
		f.mu.Unlock()
	}
	return f, nil
}

// Close kills every replica and stops the balancer and the simulator.
func (f *Fleet) Close() {
	f.mu.Lock()
	reps := f.reps
	f.reps = nil
	f.mu.Unlock()
	for _, p := range reps {
		p.Kill()
	}
	if f.Balancer != nil {
		f.Balancer.Close()
	}
	if f.upstream != nil {
		f.upstream.Close()
	}
	f.Sim.Close()
}

// Base is the balancer's base URL (http://host:port).
func (f *Fleet) Base() string { return "http://" + f.Balancer.Addr() }

// Replicas returns the replicas in service, in their order.
func (f *Fleet) Replicas() []*Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*Proc(nil), f.reps...)
}

// Replica returns replica i.
func (f *Fleet) Replica(i int) *Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reps[i]
}

// StartReplica starts a replica of the fleet's configuration and returns
// when the balancer routes to it. It is not one of Replicas until the
// caller puts it in place (Start, Replace and Surge do).
func (f *Fleet) StartReplica() (*Proc, error) {
	dir, err := os.MkdirTemp(f.cfg.Dir, "replica-")
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	p, err := StartProc(ProcConfig{Binary: f.cfg.Binary, Dir: dir, Config: f.gateway, Networks: []string{Network},
		Log: f.cfg.Log, StartTimeout: f.cfg.ReadyTimeout})
	if err != nil {
		return nil, err
	}
	if f.cfg.Started != nil {
		f.cfg.Started(p)
	}
	up := f.Balancer.Add(balancer.Backend{Addr: addrOf(p), Ready: p.Admin + "/readyz"})
	t := time.NewTimer(f.cfg.ReadyTimeout)
	defer t.Stop()
	select {
	case <-up:
		return p, nil
	case <-p.Exited():
		f.Balancer.Remove(addrOf(p))
		return nil, fmt.Errorf("fleet: a replica exited before it was ready: %s", p.Tail(20))
	case <-t.C:
		f.Balancer.Remove(addrOf(p))
		p.Kill()
		return nil, fmt.Errorf("fleet: the balancer never saw a new replica ready within %s: %s", f.cfg.ReadyTimeout, p.Tail(20))
	}
}

// addrOf is the host:port of p's listener of Network.
func addrOf(p *Proc) string {
	return strings.TrimPrefix(p.Net[Network], "http://")
}

// Replace stops replica i with sig, as a rolling deploy (SIGTERM) or a
// crash (SIGKILL) does, then starts its successor, and returns when the
// successor is routed to. The balancer learns of the stop from /readyz
// alone (as a Service does), and forgets the old address once the process
// has exited (at most 60 s).
func (f *Fleet) Replace(i int, sig syscall.Signal) error {
	old := f.Replica(i)
	if err := old.Stop(sig, 60*time.Second); err != nil {
		return err
	}
	f.Balancer.Remove(addrOf(old))
	p, err := f.StartReplica()
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.reps[i] = p
	f.mu.Unlock()
	return nil
}

// Surge replaces replica i as a Kubernetes rolling update with surge does:
// the successor is started and routed to first, then the old one gets
// SIGTERM (it turns not ready, drains and exits) and leaves the balancer.
// It returns how long the successor took to be ready.
func (f *Fleet) Surge(i int) (time.Duration, error) {
	began := time.Now()
	p, err := f.StartReplica()
	if err != nil {
		return 0, err
	}
	ready := time.Since(began)
	old := f.Replica(i)
	f.mu.Lock()
	f.reps[i] = p
	f.mu.Unlock()
	err = old.Stop(syscall.SIGTERM, 60*time.Second)
	f.Balancer.Remove(addrOf(old))
	return ready, err
}

// eachMetric reads every replica's metrics and calls fn with each
// replica's index and families.
func (f *Fleet) eachMetric(fn func(i int, fams map[string]*dto.MetricFamily)) error {
	for i, p := range f.Replicas() {
		fams, err := p.Metrics()
		if err != nil {
			return err
		}
		fn(i, fams)
	}
	return nil
}

// networkLabel selects the samples of the fleet's network.
var networkLabel = map[string]string{"network": Network}

// Holder returns the index of the replica holding the lease of a shared
// upstream connection of Network, or -1 when none says it holds one.
func (f *Fleet) Holder() (int, error) {
	holder := -1
	err := f.eachMetric(func(i int, fams map[string]*dto.MetricFamily) {
		for _, v := range Values(fams, "streamgate_ws_share_chunk_holder", networkLabel) {
			if v == 1 && holder < 0 {
				holder = i
			}
		}
	})
	return holder, err
}

// Sharing reports whether every replica shares Network's upstream
// connections through Redis.
func (f *Fleet) Sharing() (bool, error) {
	all := true
	err := f.eachMetric(func(_ int, fams map[string]*dto.MetricFamily) {
		ok := false
		for _, v := range Values(fams, "streamgate_ws_share_sharing", networkLabel) {
			ok = ok || v == 1
		}
		all = all && ok
	})
	return all, err
}

// PerReplica is the sum of the metric family name on each replica.
func (f *Fleet) PerReplica(name string) ([]float64, error) {
	out := make([]float64, len(f.Replicas()))
	err := f.eachMetric(func(i int, fams map[string]*dto.MetricFamily) {
		if i < len(out) {
			out[i] = Sum(fams, name, nil)
		}
	})
	return out, err
}

// UpstreamOpen is the number of upstream WebSocket connections open now.
func (f *Fleet) UpstreamOpen() int64 { return f.Sim.Counters().WSTotal(Network).Open }

// Refused counts the upstream's 429 answers by endpoint.
func (f *Fleet) Refused() map[string]int64 {
	out := map[string]int64{}
	f.Sim.Counters().Sum(func(n upstreamsim.Count) bool {
		if n.Status == http.StatusTooManyRequests {
			out[n.Endpoint] += n.N
		}
		return false
	})
	return out
}

// SampleUpstream records in peak the most upstream connections open at
// once, sampled every 10 ms, until the returned stop is called.
func (f *Fleet) SampleUpstream(peak *atomic.Int64) (stop func()) {
	return SamplePeak(peak, f.UpstreamOpen)
}

// SamplePeak records in peak the highest value read returns, sampled
// every 10 ms, until the returned stop is called (which waits for the
// sampler to end). The tests of in-process hubs use it too.
func SamplePeak(peak *atomic.Int64, read func() int64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			if n := read(); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			case <-tk.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// Settle marks the end of a scenario's window for clients of feeds, which
// share n: it notes, per stream, the newest second the upstream has
// published, waits (at most 60 s) until some client has a second at least
// 2 later (the stream flows again after the event), then takes per stream
// the newest second any client has and waits (at most 60 s more) until
// every client has it. It returns those seconds; a client still behind
// after the waits is the caller's to count.
func (f *Fleet) Settle(ctx context.Context, n *Notifier, feeds []string, clients []*Client) (map[string]int64, error) {
	hi := map[string]int64{}
	deadline := time.Now().Add(60 * time.Second)
	for _, feed := range feeds {
		_, published, ok := f.Sim.Window(Network, feed)
		if !ok {
			return nil, fmt.Errorf("fleet: the simulator has no stream %s", feed)
		}
		n.Await(ctx, time.Until(deadline), func() bool {
			for _, c := range clients {
				hi[feed] = max(hi[feed], c.Highest(feed))
			}
			return hi[feed] >= published+2
		})
	}
	for _, feed := range feeds {
		for _, c := range clients {
			hi[feed] = max(hi[feed], c.Highest(feed))
		}
	}
	n.Await(ctx, 60*time.Second, func() bool {
		for _, c := range clients {
			for _, feed := range feeds {
				if c.Highest(feed) < hi[feed] {
					return false
				}
			}
		}
		return true
	})
	return hi, ctx.Err()
}
