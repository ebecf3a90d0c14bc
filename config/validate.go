package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"streamgate/auth"
	"streamgate/don"
)

// Problem is one thing wrong with a configuration.
type Problem struct {
	// Path is the YAML path of the key at fault, such as
	// teams[1].keys[0].secret; empty for a problem of the text itself.
	Path string
	// Line is the line in the file, when known; else 0.
	Line int
	// Msg says what is wrong. It never contains a secret.
	Msg string
}

// Error returns "path: msg (line N)", or "line N: msg" without a path.
func (p Problem) Error() string {
	switch {
	case p.Path != "" && p.Line > 0:
		return fmt.Sprintf("%s: %s (line %d)", p.Path, p.Msg, p.Line)
	case p.Path != "":
		return p.Path + ": " + p.Msg
	case p.Line > 0:
		return fmt.Sprintf("line %d: %s", p.Line, p.Msg)
	default:
		return p.Msg
	}
}

// Problems is every problem found in a configuration, in the order of the
// file: problems of the whole document first, then by line. Parse, Load and Validate return it as their error; use errors.As to
// get the list.
type Problems []Problem

// Error returns one line per problem.
func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// Limits that Validate enforces.
const (
	// MinKeySecretLen is the shortest client key secret accepted, in bytes.
	MinKeySecretLen = 16
)

var (
	networkNameRE = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)
	teamNameRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	keyIDRE       = regexp.MustCompile(`^[!-~]{1,128}$`) // printable ASCII, no space
	hostRE        = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	passPathRE    = regexp.MustCompile(`^/api/v1(/[A-Za-z0-9_-]+)+$`)
	feedIDRE      = regexp.MustCompile(`^0x[0-9a-fA-F]{64}$`)
)

// Validate checks the whole configuration and returns every problem found
// as Problems, or nil. It does not change the Config and reads no file:
// Load and Parse read the secret files (secret_file, api_secret_file,
// password_file) before they validate, and Validate reports a file that
// could not be read or was empty. A secret file set on a Config built in
// code is not read, and is reported as such. Parse and Load call Validate;
// call it again after changing a Config in code.
func (c *Config) Validate() error {
	v := &validator{src: c.src}
	v.server(&c.Server, c.Networks)
	v.log(&c.Log)
	v.networks(c.Networks)
	if c.Auth.MaxSkew <= 0 {
		v.add("auth.max_skew", "must be positive")
	}
	if c.Auth.ReplayGrace < 0 || (c.Auth.MaxSkew > 0 && c.Auth.ReplayGrace > c.Auth.MaxSkew) {
		v.add("auth.replay_grace", "must be between 0 and auth.max_skew")
	}
	v.rate("auth.anonymous_rate", c.Auth.AnonymousRate, false)
	if c.Auth.ReplayMaxEntries < 1000 {
		v.add("auth.replay_max_entries", "must be at least 1000")
	}
	v.cache(&c.Cache)
	v.realtime(&c.Realtime)
	v.tracing(&c.Tracing)
	v.rateLimit(&c.RateLimit)
	v.teams(c.Teams, c.Networks)
	if len(v.problems) == 0 {
		return nil
	}
	v.problems.sortByLine()
	return v.problems
}

// sortByLine orders problems by line, those without a line first, keeping
// the order of problems on the same line.
func (ps Problems) sortByLine() {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Line < ps[j].Line })
}

type validator struct {
	src      *source
	problems Problems
}

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, Problem{Path: path, Line: v.src.line(path), Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) positive(path string, d time.Duration) {
	if d <= 0 {
		v.add(path, "must be positive")
	}
}

func (v *validator) server(s *Server, networks map[string]*Network) {
	if s.AdminListen != "" {
		v.listen("server.admin_listen", s.AdminListen)
		for _, name := range sortedKeys(networks) {
			if n := networks[name]; n != nil && n.Listen == s.AdminListen && !anyPort(s.AdminListen) {
				v.add("server.admin_listen", "%q is also the listen address of networks.%s", s.AdminListen, name)
			}
		}
	}
	switch {
	case s.Pprof && s.AdminListen == "":
		v.add("server.pprof", "needs server.admin_listen, which serves it")
	case s.Pprof && s.AdminToken == "" && s.AdminTokenFile == "" && !loopbackAddr(s.AdminListen):
		v.add("server.pprof", "server.admin_listen %q is not on loopback: set server.admin_token (or admin_token_file) to serve the profiles", s.AdminListen)
	}
	switch inline := s.AdminToken != "" && !s.file.read; {
	case inline && s.AdminTokenFile != "":
		v.add("server.admin_token", "give either admin_token or admin_token_file, not both")
	case s.AdminTokenFile != "":
		v.secretFile("server.admin_token_file", s.file, s.AdminToken)
	}
	if s.AdminTLS != nil {
		if s.AdminListen == "" {
			v.add("server.admin_tls", "needs server.admin_listen, which it serves")
		}
		v.tls("server.admin_tls", s.AdminTLS)
	}
	v.positive("server.shutdown_timeout", s.ShutdownTimeout)
	v.positive("server.read_header_timeout", s.ReadHeaderTimeout)
	v.positive("server.idle_timeout", s.IdleTimeout)
	v.positive("server.read_timeout", s.ReadTimeout)
	v.positive("server.write_timeout", s.WriteTimeout)
}

func (v *validator) log(l *Log) {
	if !l.Level.valid() {
		v.add("log.level", "%q is not one of debug, info, warn, error", l.Level)
	}
	if !l.Format.valid() {
		v.add("log.format", "%q is not one of json, console", l.Format)
	}
}

// listen checks a host:port listen address. Port 0 (any free port) is
// allowed.
func (v *validator) listen(path, addr string) {
	if addr == "" {
		v.add(path, "required (host:port, such as 127.0.0.1:8080 or :8080)")
		return
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.add(path, "%q is not host:port", addr)
		return
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		v.add(path, "%q: port must be a number from 0 to 65535", addr)
	}
}

// anyPort reports whether addr asks for a free port, which is never shared.
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && port == "0"
}

func (v *validator) networks(networks map[string]*Network) {
	if len(networks) == 0 {
		v.add("networks", "none configured: at least one network is required")
		return
	}
	byListen := map[string][]string{}
	for _, name := range sortedKeys(networks) {
		p := "networks." + name
		n := networks[name]
		if !networkNameRE.MatchString(name) {
			v.add(p, "network name must be 1 to 63 of a-z, 0-9 and '-'")
		}
		if n == nil {
			v.add(p, "empty: listen is required")
			continue
		}
		v.listen(p+".listen", n.Listen)
		if n.Listen != "" && !anyPort(n.Listen) {
			byListen[n.Listen] = append(byListen[n.Listen], name)
		}
		for i, h := range n.Hosts {
			if !hostRE.MatchString(h) {
				v.add(fmt.Sprintf("%s.hosts[%d]", p, i), "%q is not a host name (give it without scheme or port)", h)
			}
		}
		for i, pt := range n.PassThrough {
			if !passPathRE.MatchString(pt) {
				v.add(fmt.Sprintf("%s.pass_through[%d]", p, i), "%q must be a path under /api/v1/ of letters, digits, '-', '_' and single slashes, without query (e.g. /api/v1/something)", pt)
			}
		}
		v.upstream(p+".upstream", name, &n.Upstream)
		v.verify(p+".verify", n)
		if n.TLS != nil {
			v.tls(p+".tls", n.TLS)
		}
	}

	listens := make([]string, 0, len(byListen))
	for l := range byListen {
		listens = append(listens, l)
	}
	sort.Strings(listens)
	for _, l := range listens {
		names := byListen[l]
		if len(names) < 2 {
			continue
		}
		hostOwner := map[string]string{}
		for _, name := range names[1:] {
			if !sameTLS(networks[names[0]].TLS, networks[name].TLS) {
				v.add("networks."+name+".tls", "listen address %q is shared with networks.%s, whose tls block differs: networks on one listener share its TLS", l, names[0])
			}
		}
		for _, name := range names {
			n, p := networks[name], "networks."+name
			if len(n.Hosts) == 0 {
				v.add(p+".hosts", "required: listen address %q is shared with networks.%s", l, strings.Join(without(names, name), ", networks."))
			}
			for i, h := range n.Hosts {
				if other, dup := hostOwner[h]; dup && other != name {
					v.add(fmt.Sprintf("%s.hosts[%d]", p, i), "%q is also a host of networks.%s on the same listener", h, other)
				}
				hostOwner[h] = name
			}
		}
	}
}

func (v *validator) upstream(p, network string, u *Upstream) {
	remote := false
	switch {
	case u.URL == "" && knownNetworks[network]:
		v.add(p+".url", "empty: use %q or the upstream's http(s) URL", EmbeddedURL)
	case u.URL == "":
		v.add(p+".url", "required for a network other than mainnet and testnet: %q or the upstream's http(s) URL", EmbeddedURL)
	case u.URL == EmbeddedURL:
	default:
		remote = true
		v.upstreamURL(p+".url", u.URL)
	}
	v.credentials(p, &u.Credentials, remote)
	v.positive(p+".timeout", u.Timeout)
	if u.Retries < 0 {
		v.add(p+".retries", "must not be negative")
	}
	v.rate(p+".budget", u.Budget, true)
	if u.BudgetMargin < 0 || u.BudgetMargin > time.Second {
		v.add(p+".budget_margin", "must be from 0 to 1s")
	}
	if u.MaxBulk < 1 {
		v.add(p+".max_bulk", "must be at least 1")
	}
	if u.WSURL != "" {
		v.wsURL(p+".ws_url", u.WSURL)
	}
	if u.WSMaxConnections < 1 || u.WSMaxConnections > 20 {
		v.add(p+".ws_max_connections", "must be from 1 to 20 (the upstream allows 20 per user, for every replica together)")
	}
	if u.WSFeedsPerConnection < 1 || u.WSFeedsPerConnection > 100 {
		v.add(p+".ws_feeds_per_connection", "must be from 1 to 100 (each feed adds about 68 bytes to the request line)")
	}
	for i, f := range u.WSPinned {
		if !feedIDRE.MatchString(f) {
			v.add(fmt.Sprintf("%s.ws_pinned[%d]", p, i), "%q is not a stream ID (0x and 64 hex digits)", f)
		}
	}
}

func (v *validator) wsURL(p, raw string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		v.add(p, "not a URL")
	case u.Scheme != "ws" && u.Scheme != "wss":
		v.add(p, "must be a ws:// or wss:// URL")
	case u.Host == "":
		v.add(p, "has no host")
	case u.User != nil:
		v.add(p, "must not contain user information: the gateway signs with api_key and api_secret")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		v.add(p, "must be the service's root address, without path or query (the stream lives at /api/v1/ws)")
	}
}

func (v *validator) upstreamURL(p, raw string) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		v.add(p, "not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(p, "must be %q or an http:// or https:// URL", EmbeddedURL)
	case u.Host == "":
		v.add(p, "has no host")
	case u.User != nil:
		v.add(p, "must not contain user information: use api_key and api_secret")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		v.add(p, "must be the service's root URL, without path, query or fragment (the API lives at /api/v1 of the host)")
	}
}

// credentials checks an API key and its secret. They are required when
// required is set; else both or neither must be given.
func (v *validator) credentials(p string, c *Credentials, required bool) {
	inline := c.APISecret != "" && !c.file.read
	if inline && c.APISecretFile != "" {
		v.add(p+".api_secret", "give either api_secret or api_secret_file, not both")
		return
	}
	if c.APISecretFile != "" {
		v.secretFile(p+".api_secret_file", c.file, c.APISecret)
	}
	hasSecret := inline || c.APISecretFile != ""
	if c.APIKey == "" && (required || hasSecret) {
		v.add(p+".api_key", "required")
	}
	if !hasSecret && (required || c.APIKey != "") {
		v.add(p+".api_secret", "required (or api_secret_file)")
	}
	if c.APIKey != "" && !keyIDRE.MatchString(c.APIKey) {
		v.add(p+".api_key", "must be 1 to 128 printable ASCII characters without spaces")
	}
}

// secretFile reports the outcome of reading a secret file, recorded in st
// by readSecretFiles; secret is what was read. It reports whether the file
// gave a non-empty secret.
func (v *validator) secretFile(p string, st fileState, secret Secret) bool {
	switch {
	case !st.read:
		v.add(p, "not read: Load and Parse read secret files, Validate does not")
	case st.err != nil:
		v.add(p, "%v", st.err)
	case secret == "":
		v.add(p, "the file is empty")
	default:
		return true
	}
	return false
}

func (v *validator) realtime(r *Realtime) {
	if r.ClientQueue < 1 {
		v.add("realtime.client_queue", "must be at least 1")
	}
	v.positive("realtime.ping_interval", r.PingInterval)
	if r.TeamConnections < 1 {
		v.add("realtime.team_connections", "must be at least 1")
	}
	v.positive("realtime.grace", r.Grace)
	if r.ShareLease < 300*time.Millisecond {
		v.add("realtime.share_lease", "must be at least 300ms (its holder renews a lease every third of it)")
	}
	if len(r.ClientOrigins) > MaxClientOrigins {
		v.add("realtime.client_origins", "must list at most %d origins", MaxClientOrigins)
	}
	for i, o := range r.ClientOrigins {
		if !validOriginName(o) {
			v.add(fmt.Sprintf("realtime.client_origins[%d]", i), "must be 1 to 32 letters, digits, \"_\" or \"-\"")
		} else if slices.Contains(r.ClientOrigins[:i], o) {
			v.add(fmt.Sprintf("realtime.client_origins[%d]", i), "duplicates %q", o)
		}
	}
	for _, x := range []struct {
		path string
		d    time.Duration
		max  time.Duration
	}{
		{"realtime.drain_delay", r.DrainDelay, 10 * time.Minute},
		{"realtime.resume_window", r.ResumeWindow, time.Hour},
		{"realtime.backfill_max", r.BackfillMax, time.Hour},
	} {
		if x.d < 0 || x.d > x.max {
			v.add(x.path, "must be from 0s to %s", x.max)
		}
	}
}

// MaxClientOrigins bounds realtime.client_origins.
const MaxClientOrigins = 8

// validOriginName reports whether o may be advertised as an HA origin: the
// SDKs split the header on "," and strip braces, and Go does not trim
// spaces, so names are kept to a plain alphabet.
func validOriginName(o string) bool {
	if len(o) == 0 || len(o) > 32 {
		return false
	}
	for _, c := range o {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func (v *validator) cache(c *Cache) {
	if c.MaxBytes <= 0 {
		v.add("cache.max_bytes", "must be positive")
	}
	v.positive("cache.catalog_ttl", c.CatalogTTL)
	v.positive("cache.latest_ttl", c.LatestTTL)
	if c.LatestMaxStale < 0 {
		v.add("cache.latest_max_stale", "must not be negative")
	}
	v.positive("cache.latest_max_wait", c.LatestMaxWait)
	v.positive("cache.negative_ttl", c.NegativeTTL)

	sh := &c.Shared
	switch {
	case sh.Backend == SharedRedis:
		v.redisTarget("cache.shared", sh.Target())
	case !sh.Backend.valid():
		v.add("cache.shared.backend", "%q is not one of off, redis", sh.Backend)
	}
	v.positive("cache.shared.ttl", sh.TTL)
	if sh.MaxEntryBytes <= 0 {
		v.add("cache.shared.max_entry_bytes", "must be positive")
	}
	v.positive("cache.shared.lease", sh.Lease)
	inline := sh.Password != "" && !sh.file.read
	switch {
	case inline && sh.PasswordFile != "":
		v.add("cache.shared.password", "give either password or password_file, not both")
	case sh.PasswordFile != "":
		v.secretFile("cache.shared.password_file", sh.file, sh.Password)
	}
}

func (v *validator) rateLimit(r *RateLimit) {
	switch {
	case r.Backend == BackendRedis:
		v.redisTarget("ratelimit.redis", r.Redis.Target())
	case !r.Backend.valid():
		v.add("ratelimit.backend", "%q is not one of memory, redis", r.Backend)
	}
	if !r.Redis.FailMode.valid() {
		v.add("ratelimit.redis.fail_mode", "%q is not one of open, closed", r.Redis.FailMode)
	}
	inline := r.Redis.Password != "" && !r.Redis.file.read
	switch {
	case inline && r.Redis.PasswordFile != "":
		v.add("ratelimit.redis.password", "give either password or password_file, not both")
	case r.Redis.PasswordFile != "":
		v.secretFile("ratelimit.redis.password_file", r.Redis.file, r.Redis.Password)
	}
}

// redisTarget checks that p gives exactly one of url, sentinel and
// cluster, each well formed.
func (v *validator) redisTarget(p string, t RedisTarget) {
	var given []string
	if t.URL != "" {
		given = append(given, "url")
	}
	if t.Sentinel != nil {
		given = append(given, "sentinel")
	}
	if t.Cluster != nil {
		given = append(given, "cluster")
	}
	switch len(given) {
	case 0:
		v.add(p, "give one of url, sentinel or cluster (required when backend is redis)")
	case 1:
	default:
		v.add(p, "give exactly one of url, sentinel or cluster, not %s", strings.Join(given, " and "))
	}
	if t.URL != "" {
		v.redisURL(p+".url", t.URL)
		if t.TLS {
			v.add(p+".tls", "applies to sentinel and cluster; a url turns TLS on with rediss://")
		}
	}
	if s := t.Sentinel; s != nil {
		if s.Master == "" {
			v.add(p+".sentinel.master", "required: the name the sentinels monitor the master under")
		}
		v.redisAddrs(p+".sentinel.addrs", s.Addrs)
		inline := s.SentinelPassword != "" && !s.file.read
		switch {
		case inline && s.SentinelPasswordFile != "":
			v.add(p+".sentinel.sentinel_password", "give either sentinel_password or sentinel_password_file, not both")
		case s.SentinelPasswordFile != "":
			v.secretFile(p+".sentinel.sentinel_password_file", s.file, s.SentinelPassword)
		}
	}
	if c := t.Cluster; c != nil {
		v.redisAddrs(p+".cluster.addrs", c.Addrs)
	}
}

// redisAddrs checks a list of HOST:PORT addresses.
func (v *validator) redisAddrs(p string, addrs []string) {
	if len(addrs) == 0 {
		v.add(p, "required: at least one HOST:PORT")
	}
	seen := map[string]bool{}
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil || host == "":
			v.add(fmt.Sprintf("%s[%d]", p, i), "%q is not HOST:PORT", a)
		case perr != nil || n < 1 || n > 65535:
			v.add(fmt.Sprintf("%s[%d]", p, i), "%q has no valid port", a)
		case seen[a]:
			v.add(fmt.Sprintf("%s[%d]", p, i), "%q is given twice", a)
		}
		seen[a] = true
	}
}

func (v *validator) redisURL(p, raw string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		v.add(p, "required when backend is redis")
	case err != nil:
		v.add(p, "not a URL")
	case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
		v.add(p, "must be a redis://, rediss:// or unix:// URL")
	case u.Scheme != "unix" && u.Host == "":
		v.add(p, "has no host")
	case u.Scheme == "unix" && u.Path == "":
		v.add(p, "has no socket path")
	default:
		if _, hasPassword := u.User.Password(); hasPassword {
			v.add(p, "must not contain a password: use password or password_file")
		}
	}
}

// rate checks a token bucket. A budget must be positive; a team's or a
// key's rate may be 0 (no limit).
func (v *validator) rate(p string, r Rate, budget bool) {
	switch {
	case math.IsNaN(r.RPS) || math.IsInf(r.RPS, 0):
		v.add(p+".rps", "must be a finite number")
	case budget && r.RPS <= 0:
		v.add(p+".rps", "must be positive")
	case r.RPS < 0:
		v.add(p+".rps", "must not be negative")
	case r.RPS > 0 && r.Burst < 1:
		v.add(p+".burst", "must be at least 1 when rps is set")
	}
	if r.Burst < 0 {
		v.add(p+".burst", "must not be negative")
	}
}

func (v *validator) teams(teams []Team, networks map[string]*Network) {
	teamAt := map[string]int{}
	keyAt := map[string]string{}
	for i := range teams {
		t, p := &teams[i], teamPath(i)
		switch prev, dup := teamAt[t.Name]; {
		case t.Name == "":
			v.add(p+".name", "required")
		case !teamNameRE.MatchString(t.Name):
			v.add(p+".name", "must be 1 to 64 of letters, digits, '.', '_' and '-', starting with a letter or digit")
		case dup:
			v.add(p+".name", "%q is also the name of %s", t.Name, teamPath(prev))
		default:
			teamAt[t.Name] = i
		}

		if len(t.Networks) == 0 {
			v.add(p+".networks", "required: the networks the team may call")
		}
		for j, name := range t.Networks {
			if _, ok := networks[name]; !ok {
				v.add(fmt.Sprintf("%s.networks[%d]", p, j), "no network named %q", name)
			}
		}
		v.feeds(p+".feeds", t.Feeds)
		v.rate(p+".rate", t.Rate, false)
		if t.DailyQuota < 0 {
			v.add(p+".daily_quota", "must not be negative (0 is unlimited)")
		}
		for _, name := range sortedKeys(t.Upstream) {
			up := p + ".upstream." + name
			if !t.HasNetwork(name) {
				v.add(up, "the team does not use network %q", name)
			}
			c := t.Upstream[name]
			if c == nil { // only in a Config built in code
				c = &Credentials{}
			}
			v.credentials(up, c, true)
		}

		if len(t.Keys) == 0 {
			v.add(p+".keys", "required: at least one key")
		}
		for j := range t.Keys {
			k, kp := &t.Keys[j], keyPath(i, j)
			switch prev, dup := keyAt[k.ID]; {
			case k.ID == "":
				v.add(kp+".id", "required")
			case !keyIDRE.MatchString(k.ID):
				v.add(kp+".id", "must be 1 to 128 printable ASCII characters without spaces")
			case dup:
				v.add(kp+".id", "%q is also the id of %s", k.ID, prev)
			default:
				keyAt[k.ID] = kp
			}
			v.keySecrets(kp, k)
			v.clientCert(kp+".client_cert", t, k, networks)
			v.rate(kp+".rate", k.Rate, false)
			v.demoSecret(kp, t, k, networks)
		}
	}
}

func (v *validator) feeds(p string, feeds []string) {
	if len(feeds) == 0 {
		v.add(p, `required: ["*"] or a list of stream IDs`)
		return
	}
	for i, f := range feeds {
		switch {
		case f == AllFeedsWildcard && len(feeds) > 1:
			v.add(fmt.Sprintf("%s[%d]", p, i), `"*" must be the only entry`)
		case f == AllFeedsWildcard:
		case !feedIDRE.MatchString(f):
			v.add(fmt.Sprintf("%s[%d]", p, i), "%q is not a stream ID (0x and 64 hex digits)", f)
		}
	}
}

// keySecrets checks that exactly one of secret, secrets and secret_file is
// given, that the file was read, and every secret's length.
func (v *validator) keySecrets(p string, k *Key) {
	inline := k.Secret != "" && !k.file.read
	given := 0
	for _, set := range []bool{inline, k.SecretList != nil, k.SecretFile != ""} {
		if set {
			given++
		}
	}
	switch {
	case given == 0:
		v.add(p+".secret", "required (or secrets, or secret_file)")
	case given > 1:
		v.add(p+".secret", "give exactly one of secret, secrets, secret_file")
	case inline:
		v.secretLen(p+".secret", k.Secret)
	case k.SecretList != nil:
		if len(k.SecretList) == 0 {
			v.add(p+".secrets", "empty")
		}
		for i, s := range k.SecretList {
			v.secretLen(fmt.Sprintf("%s.secrets[%d]", p, i), s)
		}
	default:
		if v.secretFile(p+".secret_file", k.file, k.Secret) {
			v.secretLen(p+".secret_file", k.Secret)
		}
	}
}

func (v *validator) secretLen(p string, s Secret) {
	switch n := len(s.Reveal()); {
	case n == 0:
		v.add(p, "empty")
	case n < MinKeySecretLen:
		v.add(p, "too short: %d bytes, at least %d are required", n, MinKeySecretLen)
	}
}

// demoSecret refuses the published demo secrets on a team that can reach a
// real upstream: anyone who has read the source could use it.
func (v *validator) demoSecret(p string, t *Team, k *Key, networks map[string]*Network) {
	demo := false
	for _, s := range k.Secrets() {
		if s == DemoKeySecret || s == ResearchKeySecret {
			demo = true
		}
	}
	if !demo {
		return
	}
	for _, name := range t.Networks {
		if n := networks[name]; n != nil && !localUpstream(n.Upstream.URL) {
			v.add(p, "uses a published demo secret, which may only reach the embedded or a loopback upstream, not networks.%s", name)
			return
		}
	}
}

// loopbackAddr reports whether the host of host:port addr is a loopback
// address or localhost.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func localUpstream(raw string) bool {
	if raw == EmbeddedURL || raw == "" {
		return true
	}
	u, err := url.Parse(raw)
	if err != nil {
		return true // reported as a URL problem
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func teamPath(i int) string   { return fmt.Sprintf("teams[%d]", i) }
func keyPath(i, j int) string { return fmt.Sprintf("teams[%d].keys[%d]", i, j) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func without(list []string, s string) []string {
	out := make([]string, 0, len(list))
	for _, e := range list {
		if e != s {
			out = append(out, e)
		}
	}
	return out
}

func (v *validator) verify(p string, n *Network) {
	vf := &n.Verify
	switch n.VerifyMode() {
	case VerifyEnforce, VerifyReport:
		if !vf.Configured() && !n.Upstream.Embedded() {
			v.add(p+".mode", "%s needs the DON configurations to trust: dons or dons_file (only an embedded upstream brings its own)", n.VerifyMode())
		}
	case VerifyOff:
	default:
		v.add(p+".mode", "%q is not one of enforce, report, off", vf.Mode)
	}
	if vf.DONsFile != "" {
		switch {
		case !vf.file.read:
			v.add(p+".dons_file", "not read: Load and Parse read it, Validate does not")
		case vf.file.err != nil:
			v.add(p+".dons_file", "%v", vf.file.err)
		case len(vf.fileDONs) == 0:
			v.add(p+".dons_file", "holds no DON configuration")
		}
		for i, d := range vf.fileDONs {
			v.don(fmt.Sprintf("%s.dons_file[%d]", p, i), d)
		}
	}
	for i, d := range vf.DONs {
		v.don(fmt.Sprintf("%s.dons[%d]", p, i), d)
	}
	if _, err := vf.Verifier(); err != nil && len(v.problems) == 0 {
		v.add(p, "%v", err)
	}
	seen := map[string]bool{}
	for _, d := range vf.AllDONs() {
		k := strings.ToLower(d.ConfigDigest)
		if seen[k] {
			v.add(p, "config digest %s is given twice", d.ConfigDigest)
		}
		seen[k] = true
	}
}

func (v *validator) don(p string, d DON) {
	if _, err := don.ParseDigest(d.ConfigDigest); err != nil {
		v.add(p+".config_digest", "%v", err)
	}
	if d.F < 0 {
		v.add(p+".f", "must not be negative")
	}
	if len(d.Signers) <= d.F {
		v.add(p+".signers", "%d signers cannot make more than f = %d signatures", len(d.Signers), d.F)
	}
	seen := map[string]bool{}
	for i, s := range d.Signers {
		if _, err := don.ParseAddress(s); err != nil {
			v.add(fmt.Sprintf("%s.signers[%d]", p, i), "%v", err)
		}
		if seen[strings.ToLower(s)] {
			v.add(fmt.Sprintf("%s.signers[%d]", p, i), "%s is given twice", s)
		}
		seen[strings.ToLower(s)] = true
	}
}

// tls checks a listener's TLS block; its files were read at load.
func (v *validator) tls(p string, t *TLS) {
	if t.CertFile == "" {
		v.add(p+".cert_file", "required: the listener's PEM certificate")
	}
	if t.KeyFile == "" {
		v.add(p+".key_file", "required: the certificate's PEM private key")
	}
	switch {
	case !t.ClientAuth.Valid():
		v.add(p+".client_auth", "%q: want none, verify_if_given or require", t.ClientAuth)
	case t.asksClientCerts() && t.ClientCAFile == "":
		v.add(p+".client_ca_file", "required by client_auth %s: the CA certificates that verify clients", t.ClientAuth)
	case !t.asksClientCerts() && t.ClientCAFile != "":
		v.add(p+".client_ca_file", "set, but client_auth is none: no client certificate is asked for (use verify_if_given or require)")
	}
	if t.err != nil {
		v.add(p, "%v", t.err)
	}
}

func sameTLS(a, b *TLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Files() == b.Files()
}

// clientCert checks a key's client certificate binding: a pin that parses,
// and networks that ask for client certificates.
func (v *validator) clientCert(p string, t *Team, k *Key, networks map[string]*Network) {
	c := k.ClientCert
	if c == nil {
		return
	}
	if c.SPKISHA256 == "" && c.SAN == "" {
		v.add(p, "give spki_sha256, san or both: the certificate the key must come with")
	}
	if c.SPKISHA256 != "" {
		if _, err := auth.ParseSPKI(c.SPKISHA256); err != nil {
			v.add(p+".spki_sha256", "want the SHA-256 of the certificate's public key, 64 hex digits or 44 base64 characters")
		}
	}
	for _, name := range t.Networks {
		if n := networks[name]; n != nil && !n.TLS.asksClientCerts() {
			v.add(p, "network %s does not verify client certificates: set networks.%s.tls.client_auth to verify_if_given or require (with client_ca_file)", name, name)
		}
	}
}
