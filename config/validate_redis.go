package config

import (
	"net"
	"net/url"
	"strconv"
	"strings"

	"streamgate/redisconn"
)

// redisTarget checks that block, ratelimit.redis or cache.shared, gives
// exactly one of url, sentinel and cluster, each well formed.
func (v *validator) redisTarget(block any, rawURL *string, tls *bool, sentinel **RedisSentinel, cluster **RedisCluster) {
	var given []string
	if *rawURL != "" {
		given = append(given, lastKey(v.at.of(rawURL)))
	}
	if *sentinel != nil {
		given = append(given, lastKey(v.at.of(sentinel)))
	}
	if *cluster != nil {
		given = append(given, lastKey(v.at.of(cluster)))
	}
	switch len(given) {
	case 0:
		v.add(block, "give one of url, sentinel or cluster (required when backend is redis)")
	case 1:
	default:
		v.add(block, "give exactly one of url, sentinel or cluster, not %s", strings.Join(given, " and "))
	}
	if *rawURL != "" {
		v.redisURL(rawURL)
		if *tls {
			v.add(tls, "applies to sentinel and cluster; a url turns TLS on with rediss://")
		}
	}
	if s := *sentinel; s != nil {
		if s.Master == "" {
			v.add(&s.Master, "required: the name the sentinels monitor the master under")
		}
		v.redisAddrs(&s.Addrs)
		v.secret(&s.SentinelPassword, &s.SentinelPasswordFile, s.file)
	}
	if c := *cluster; c != nil {
		v.redisAddrs(&c.Addrs)
	}
}

// redisAddrs checks a list of HOST:PORT addresses (a host with a user or
// a path is none). A message names an address redacted: one given as a
// URL, or as USER:PASSWORD@HOST:PORT, may hold a password.
func (v *validator) redisAddrs(addrs *[]string) {
	if len(*addrs) == 0 {
		v.add(addrs, "required: at least one HOST:PORT")
	}
	seen := map[string]bool{}
	for i, a := range *addrs {
		host, port, err := net.SplitHostPort(a)
		n, perr := strconv.Atoi(port)
		shown := redisconn.Redact(a)
		switch {
		case err != nil || host == "" || strings.ContainsAny(host, "@/"):
			v.add(&(*addrs)[i], "%q is not HOST:PORT", shown)
		case perr != nil || n < 1 || n > 65535:
			v.add(&(*addrs)[i], "%q has no valid port", shown)
		case seen[a]:
			v.add(&(*addrs)[i], "%q is given twice", shown)
		}
		seen[a] = true
	}
}

func (v *validator) redisURL(field *string) {
	raw := *field
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		v.add(field, "required when backend is redis")
	case err != nil:
		v.add(field, "not a URL")
	case u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix":
		v.add(field, "must be a redis://, rediss:// or unix:// URL")
	case u.Scheme != "unix" && u.Host == "":
		v.add(field, "has no host")
	case u.Scheme == "unix" && u.Path == "":
		v.add(field, "has no socket path")
	default:
		if _, hasPassword := u.User.Password(); hasPassword {
			v.add(field, "must not contain a password: use password or password_file")
		}
	}
}
