// Package redisconn builds every Redis client of the process from its
// configuration (a single node, a master that Redis Sentinel monitors, or a
// Redis Cluster) and owns what they share: a deadline and a circuit breaker
// around every call, their health, and their metrics
// (streamgate_redis_*). The clients are go-redis's own (NewClient,
// NewFailoverClient, NewClusterClient) and their users see them as
// redis.UniversalClient: the library follows failovers, MOVED and ASK
// redirects and retries READONLY, LOADING, CLUSTERDOWN and TRYAGAIN
// itself, within each call's deadline.
package redisconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/zap"
)

// Mode is how a client reaches Redis.
type Mode string

// The modes.
const (
	ModeSingle   Mode = "single"
	ModeSentinel Mode = "sentinel"
	ModeCluster  Mode = "cluster"
)

// Defaults of Options.
const (
	// DefaultCommandTimeout bounds every call (a command, a pipeline or
	// a transaction), from taking a connection out of the pool to reading
	// the reply, the library's retries and redirects included. The calls
	// of streamgate are O(1) scripts and pipelines that a healthy Redis
	// answers in well under a millisecond, a few across zones; 100ms is
	// far above that, yet a request that meets a hanging Redis loses at
	// most that much.
	DefaultCommandTimeout = 100 * time.Millisecond
	// DefaultDialTimeout bounds one dial. go-redis dials in the
	// background and a caller waits for it only until its call's
	// deadline, so this is not a request's wait.
	DefaultDialTimeout = time.Second
	// DefaultBreakerFailures consecutive failed calls open the breaker:
	// enough that one lost packet does not, few enough that a hanging
	// Redis costs a handful of timeouts. Calls in flight together that
	// fail together (one moment of a stalled process or a busy Redis)
	// are one failure: each of the failures in a row was sent after the
	// one before had failed.
	DefaultBreakerFailures = 3
	// DefaultBreakerOpen is how long the breaker stays open before one
	// probe may go to Redis.
	DefaultBreakerOpen = time.Second
	// DefaultWatchInterval is how often a Sentinel or Cluster client
	// looks where the masters are, to count failovers.
	DefaultWatchInterval = time.Second
	// openWatchInterval is how often a Sentinel or Cluster client looks
	// where the masters are while its breaker is open (if WatchInterval
	// is not shorter): a failover is seen within it, and the new masters
	// probed at once (see Client.watch). A look asks a sentinel, or one
	// cluster node for its slots: not the master that is gone.
	openWatchInterval = 100 * time.Millisecond
)

// The library's own retries: a few, short, all within the call's
// deadline. They carry a call across a READONLY or LOADING answer, a
// connection the failover closed, a cluster's MOVED (redirects do not
// wait) and CLUSTERDOWN while a replica takes over.
const (
	maxRetries      = 2
	minRetryBackoff = 5 * time.Millisecond
	maxRetryBackoff = 40 * time.Millisecond
)

// Options configure New. The zero value is valid.
type Options struct {
	// Name names the client in metrics and logs: "ratelimit" (the limits,
	// the replay record and the stream sharing) or "shared" (the shared
	// cache tier). Default "redis".
	Name string
	// CommandTimeout is the deadline of each call (see
	// DefaultCommandTimeout). A caller's earlier deadline wins.
	CommandTimeout time.Duration
	// DialTimeout bounds one dial. Default DefaultDialTimeout.
	DialTimeout time.Duration
	// BreakerFailures is how many consecutive failed calls open the
	// breaker, the calls in flight together that fail together counting
	// as one. Default DefaultBreakerFailures.
	BreakerFailures int
	// BreakerOpen is how long the breaker stays open before it lets one
	// probe through. Default DefaultBreakerOpen.
	BreakerOpen time.Duration
	// WatchInterval is how often a Sentinel or Cluster client looks where
	// its masters are. Default DefaultWatchInterval.
	WatchInterval time.Duration
	// Metrics receives the client's metrics; nil records nothing.
	Metrics *Metrics
	// Logger receives one line when Redis becomes unavailable, one when
	// it has recovered and one per failover seen; nil logs nothing.
	Logger *zap.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.CommandTimeout < 0 || o.DialTimeout < 0 || o.BreakerFailures < 0 || o.BreakerOpen < 0 || o.WatchInterval < 0 {
		return o, errors.New("redisconn: negative client option")
	}
	if o.Name == "" {
		o.Name = "redis"
	}
	if o.CommandTimeout == 0 {
		o.CommandTimeout = DefaultCommandTimeout
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = DefaultBreakerFailures
	}
	if o.BreakerOpen == 0 {
		o.BreakerOpen = DefaultBreakerOpen
	}
	if o.WatchInterval == 0 {
		o.WatchInterval = DefaultWatchInterval
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o, nil
}

// Client is one Redis client of the process: a go-redis client (single,
// failover or cluster) with a deadline and a circuit breaker around every
// call. Its users take it as a redis.UniversalClient.
//
// Every call has a deadline of Options.CommandTimeout, which covers the
// wait for a connection, the dial, the library's retries and the reply;
// a caller's earlier deadline or cancellation also ends it. A circuit
// breaker (github.com/sony/gobreaker) wraps every call: after
// Options.BreakerFailures consecutive failures (timeouts, connection
// errors, and the answers of a server that cannot serve now: READONLY,
// LOADING, CLUSTERDOWN, MASTERDOWN, TRYAGAIN, an unresolved MOVED or
// ASK) it opens, and for Options.BreakerOpen every call fails at once
// with an error wrapping ErrCircuitOpen; then one probe goes, whose
// success closes it. Other replies of Redis, errors included (redis.Nil,
// a script's error, WRONGTYPE, NOSCRIPT), are successes: Redis answered.
// The users fall back as their fail mode says while calls fail.
//
// The client is meant for short commands: a blocking one (BLPOP, XREAD
// BLOCK) would be cut at the deadline; subscriptions are not calls and
// have no deadline.
type Client struct {
	redis.UniversalClient
	mode Mode
	name string
	addr string // what the logs say: the URL's address, the master's name, the nodes
	hook *breakerHook
	m    *clientMetrics
	log  *zap.Logger

	sentinels []*redis.SentinelClient // ModeSentinel: to watch the master
	master    string                  // ModeSentinel: the sentinels' configured master name
	// probeTimeout bounds the watcher's probe: a dial (through the
	// sentinels) and one reply.
	probeTimeout time.Duration
	stop         chan struct{}
	done         sync.WaitGroup
	closeOnce    sync.Once
}

// Target is the Redis one client speaks to: exactly one of URL (a single
// node), Sentinel and Cluster.
type Target struct {
	// URL is a redis://, rediss:// or unix:// URL of a single node.
	URL string
	// Sentinel names a master that Redis Sentinel monitors.
	Sentinel *Sentinel
	// Cluster are some of a Redis Cluster's nodes, HOST:PORT each.
	Cluster []string
	// TLS turns TLS on for Sentinel or Cluster.
	TLS bool
	// Password is the data nodes' password; if not empty it replaces a
	// URL's.
	Password string
}

// Sentinel is a master that Redis Sentinel monitors.
type Sentinel struct {
	Master   string   // the name the sentinels monitor it under
	Addrs    []string // the sentinels, HOST:PORT each
	Password string   // the sentinels' own, if any
}

// New builds the client t describes. It does not dial: a Redis that is
// down at start is reached when it answers.
func New(t Target, opts Options) (*Client, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{name: opts.Name, log: opts.Logger, stop: make(chan struct{}),
		probeTimeout: opts.DialTimeout + opts.CommandTimeout}
	var tlsConf *tls.Config
	if t.TLS {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	password := t.Password
	// The options the Sentinel and Cluster clients share, in go-redis's
	// own universal form.
	uo := &redis.UniversalOptions{
		Password:        password,
		TLSConfig:       tlsConf,
		DialTimeout:     opts.DialTimeout,
		ReadTimeout:     opts.CommandTimeout,
		WriteTimeout:    opts.CommandTimeout,
		MaxRetries:      maxRetries,
		MinRetryBackoff: minRetryBackoff,
		MaxRetryBackoff: maxRetryBackoff,
		DialerRetries:   1,
		// A node that failed is tried again after a second, not
		// fifteen: after a failover it may be back as a replica.
		FailingTimeoutSeconds: 1,

		ContextTimeoutEnabled: true,
	}
	switch {
	case t.Sentinel != nil:
		c.mode, c.master = ModeSentinel, t.Sentinel.Master
		c.addr = "sentinel master " + t.Sentinel.Master
		uo.MasterName = t.Sentinel.Master
		uo.SentinelPassword = t.Sentinel.Password
		// A copy: the client may append to it, and two clients may be
		// given the same configuration.
		uo.Addrs = slices.Clone(t.Sentinel.Addrs)
		c.UniversalClient = redis.NewFailoverClient(uo.Failover())
		for _, a := range t.Sentinel.Addrs {
			c.sentinels = append(c.sentinels, redis.NewSentinelClient(&redis.Options{
				Addr: a, Password: t.Sentinel.Password, TLSConfig: tlsConf,
				DialTimeout: opts.DialTimeout, ReadTimeout: opts.DialTimeout, WriteTimeout: opts.DialTimeout,
				MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
			}))
		}
	case len(t.Cluster) > 0:
		c.mode = ModeCluster
		redacted := make([]string, len(t.Cluster))
		for i, a := range t.Cluster {
			redacted[i] = Redact(a)
		}
		c.addr = "cluster " + strings.Join(redacted, ",")
		uo.Addrs = slices.Clone(t.Cluster) // the client appends the nodes it learns
		c.UniversalClient = redis.NewClusterClient(uo.Cluster())
	default:
		c.mode = ModeSingle
		ro, err := redis.ParseURL(t.URL)
		if err != nil {
			// url.Parse's error quotes the URL whole, password and all.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("redisconn: redis url %s: %w", Redact(t.URL), err)
		}
		if password != "" {
			ro.Password = password
		}
		c.addr = ro.Addr
		ro.DialTimeout = opts.DialTimeout
		// The deadline of the hook bounds every read and write; these
		// only back it up for the connection's own housekeeping.
		ro.ReadTimeout, ro.WriteTimeout = opts.CommandTimeout, opts.CommandTimeout
		ro.ContextTimeoutEnabled = true
		ro.MaxRetries, ro.MinRetryBackoff, ro.MaxRetryBackoff = maxRetries, minRetryBackoff, maxRetryBackoff
		ro.DialerRetries = 1
		c.UniversalClient = redis.NewClient(ro)
	}
	c.m = opts.Metrics.client(c.name, c.mode)
	c.hook = newBreakerHook(c.addr, opts, c.m)
	c.UniversalClient.AddHook(c.hook)
	if c.mode != ModeSingle {
		c.done.Add(1)
		go c.watch(opts.WatchInterval)
	}
	return c, nil
}

// NewURL is New for a single node at url with password (if not empty,
// it replaces the URL's).
func NewURL(url, password string, opts Options) (*Client, error) {
	return New(Target{URL: url, Password: password}, opts)
}

// Mode is how the client reaches Redis.
func (c *Client) Mode() Mode { return c.mode }

// ReloadState has a cluster client read where the slots are again (in the
// background, at most every 200 ms); other clients need not. The stream
// sharing calls it when its subscription must move to another node.
func (c *Client) ReloadState(ctx context.Context) {
	if cc, ok := c.UniversalClient.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
}

// Health reports whether the client can use Redis now, and if not, why:
// "" while its breaker is closed, else a sentence naming the client, its
// mode and the last failure (never a password).
func (c *Client) Health() string {
	state := c.hook.state()
	if state == gobreaker.StateClosed {
		return ""
	}
	cause := "no answer"
	if p := c.hook.lastErr.Load(); p != nil {
		cause = (*p).Error()
	}
	what := "open: calls fail at once"
	if state == gobreaker.StateHalfOpen {
		what = "half-open: one probe goes"
	}
	return fmt.Sprintf("Redis (%s, %s) unavailable, breaker %s; last failure: %s", c.name, c.mode, what, cause)
}

// Ready returns a channel that is closed while the client's breaker is
// closed: closed already when the client may use Redis now, else closed
// when its breaker closes again (a probe succeeded). Each outage has its
// own channel: take it again after it was closed to wait for the next
// recovery. Its users may wait on it to act at once when Redis is back.
func (c *Client) Ready() <-chan struct{} { return c.hook.readyCh() }

// Close stops the client and its watcher.
func (c *Client) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.stop)
		c.done.Wait()
		for _, s := range c.sentinels {
			_ = s.Close()
		}
		err = c.UniversalClient.Close()
	})
	return err
}

// ErrNotMaster is returned by CheckServer for a single-node URL that
// names a server that cannot be used as one.
var ErrNotMaster = errors.New("redisconn: not a single Redis master")

// CheckServer asks a single node whether it is what a url must name: a
// master, not a cluster node and not a replica. A server that does not
// answer is not refused (the users fall back until it does); a cluster
// node or a replica is, with an error that wraps ErrNotMaster and says
// which configuration to use instead. Sentinel and Cluster clients find
// their masters themselves: nil.
func (c *Client) CheckServer(ctx context.Context) (reachable bool, err error) {
	if c.mode != ModeSingle {
		return true, nil
	}
	info, err := c.Info(ctx, "cluster", "replication").Result()
	if err != nil {
		return false, nil // unreachable is the fail mode's business, not an error
	}
	if strings.Contains(info, "cluster_enabled:1") {
		return true, fmt.Errorf("%w: %s is a Redis Cluster node (CLUSTER INFO: cluster_enabled); configure cluster: {addrs: [...]} instead of url", ErrNotMaster, c.addr)
	}
	if strings.Contains(info, "role:slave") || strings.Contains(info, "role:replica") {
		return true, fmt.Errorf("%w: %s is a replica, which refuses writes; point url at the master, or configure sentinel: {master, addrs} to follow failovers", ErrNotMaster, c.addr)
	}
	return true, nil
}

// watch looks where the masters are every interval and counts each change
// as a failover seen.
//
// While the breaker is not closed it looks every openWatchInterval, and
// once it has seen the masters move it probes them itself, outside the
// breaker, at each look until a probe succeeds, which closes the breaker
// at once: the failover has ended, and the client need not wait for the
// breaker's next probe (up to BreakerOpen later) to use the new master.
// Only the watcher probes, one call at a time: the calls of the process
// still fail at once while Redis is away, and a Redis that is down
// without a failover (a master restarting in place) is probed by the
// breaker alone, as before.
func (c *Client) watch(every time.Duration) {
	defer c.done.Done()
	t := time.NewTimer(every)
	defer t.Stop()
	var last string
	moved := false // the masters moved since the breaker was last closed
	for {
		now := c.masters()
		if now != "" {
			if last != "" && now != last {
				c.m.failover()
				moved = true
				c.log.Info("redis failover seen: the masters moved",
					zap.String("client", c.name), zap.String("mode", string(c.mode)),
					zap.String("was", last), zap.String("now", now))
			}
			last = now
		}
		wait := every
		if c.hook.state() == gobreaker.StateClosed {
			moved = false
			c.hook.newMaster.Store(false)
		} else {
			wait = min(every, openWatchInterval)
			if moved {
				c.hook.newMaster.Store(true)
				if err := c.probe(); err != nil {
					c.log.Debug("redis failover seen, its new master not ready yet",
						zap.String("client", c.name), zap.Error(err))
				} else if c.hook.closeAfterProbe(probeAfterFailover) {
					moved = false
					c.hook.newMaster.Store(false)
				}
			}
		}
		t.Reset(wait)
		select {
		case <-c.stop:
			return
		case <-c.hook.opened:
		case <-t.C:
		}
	}
}

// probeAfterFailover is what closed the breaker, in the recovery's log
// line, when the watcher's probe did.
const probeAfterFailover = "a probe of the new master after a failover"

// probeCall marks the context of the watcher's probe: the hook lets it
// through whatever the breaker's state, and it counts neither way; its
// dial (which the pool may make with a context of its own) is let
// through by breakerHook.newMaster.
type probeCall struct{}

// probe asks the masters the client knows now whether they serve, past
// the breaker: for a Sentinel client, the master the sentinels name must
// say ROLE master; for a cluster, every master of the slots must answer
// PING. nil when they do.
func (c *Client) probe() error {
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), probeCall{}, true), c.probeTimeout)
	defer cancel()
	switch c.mode {
	case ModeSentinel:
		role, err := c.UniversalClient.Do(ctx, "ROLE").Slice()
		if err != nil {
			return fmt.Errorf("redisconn: probe: %w", err)
		}
		if len(role) == 0 || role[0] != "master" {
			return fmt.Errorf("redisconn: probe: the sentinels' master says ROLE %v", role)
		}
		return nil
	case ModeCluster:
		// ForEachMaster reads the slots afresh first: the client's own
		// state follows the failover too.
		err := c.UniversalClient.(*redis.ClusterClient).ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.Ping(ctx).Err()
		})
		if err != nil {
			return fmt.Errorf("redisconn: probe: %w", err)
		}
		return nil
	}
	return nil
}

// masters describes where the masters are now, "" if unknown: the master's
// address the sentinels give (the first that answers), or the cluster's
// slot ranges and their masters as the client knows them.
func (c *Client) masters() string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	switch c.mode {
	case ModeSentinel:
		for _, s := range c.sentinels {
			addr, err := s.GetMasterAddrByName(ctx, c.master).Result()
			if err == nil && len(addr) == 2 {
				return net.JoinHostPort(addr[0], addr[1])
			}
		}
	case ModeCluster:
		cc := c.UniversalClient.(*redis.ClusterClient)
		var masters []string
		var mu sync.Mutex
		// The client's own view, which ForEachMaster reloads from a
		// node first (no call of the process's: no hook sees it).
		err := cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			mu.Lock()
			masters = append(masters, n.Options().Addr)
			mu.Unlock()
			return nil
		})
		if err == nil {
			slices.Sort(masters)
			return strings.Join(masters, ",")
		}
	}
	return ""
}
