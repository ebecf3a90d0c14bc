package config

import "go.uber.org/zap/zapcore"

var (
	_ zapcore.ObjectMarshaler = (*Key)(nil)
	_ zapcore.ObjectMarshaler = (*Team)(nil)
	_ zapcore.ObjectMarshaler = (*Credentials)(nil)
	_ zapcore.ObjectMarshaler = (*Upstream)(nil)
	_ zapcore.ObjectMarshaler = (*Network)(nil)
	_ zapcore.ObjectMarshaler = (*Redis)(nil)
	_ zapcore.ObjectMarshaler = Rate{}
)

// zap.Any(key, secret) logs a Secret through its String method, and
// zap.Any(key, cfg) through its JSON encoding; both are redacted. The
// ObjectMarshaler implementations below give typed fields without secrets
// for zap.Object.

// MarshalLogObject logs the key's ID, how many secrets it has and its rate;
// never a secret.
func (k *Key) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("id", k.ID)
	enc.AddInt("secrets", len(k.Secrets()))
	if !k.Rate.Unlimited() {
		return enc.AddObject("rate", k.Rate)
	}
	return nil
}

// MarshalLogObject logs the team's name, networks, feeds, limits and keys;
// never a secret.
func (t *Team) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("name", t.Name)
	if err := enc.AddArray("networks", stringList(t.Networks)); err != nil {
		return err
	}
	if t.AllFeeds() {
		enc.AddString("feeds", AllFeedsWildcard)
	} else {
		enc.AddInt("feeds", len(t.Feeds))
	}
	if !t.Rate.Unlimited() {
		if err := enc.AddObject("rate", t.Rate); err != nil {
			return err
		}
	}
	if t.DailyQuota > 0 {
		enc.AddInt64("daily_quota", t.DailyQuota)
	}
	return enc.AddArray("keys", keysArray(t.Keys))
}

// MarshalLogObject logs the API key and a redacted secret.
func (c *Credentials) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("api_key", c.APIKey)
	enc.AddString("api_secret", c.APISecret.String())
	if c.APISecretFile != "" {
		enc.AddString("api_secret_file", c.APISecretFile)
	}
	return nil
}

// MarshalLogObject logs the upstream's settings with a redacted secret.
func (u *Upstream) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("url", u.URL)
	if err := u.Credentials.MarshalLogObject(enc); err != nil {
		return err
	}
	enc.AddDuration("timeout", u.Timeout)
	enc.AddInt("retries", u.Retries)
	enc.AddInt("max_bulk", u.MaxBulk)
	if u.WSURL != "" {
		enc.AddString("ws_url", u.WSURL)
		enc.AddInt("ws_max_connections", u.WSMaxConnections)
	}
	enc.AddDuration("budget_margin", u.BudgetMargin)
	return enc.AddObject("budget", u.Budget)
}

// MarshalLogObject logs the network's listener and upstream.
func (n *Network) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("listen", n.Listen)
	if len(n.Hosts) > 0 {
		if err := enc.AddArray("hosts", stringList(n.Hosts)); err != nil {
			return err
		}
	}
	return enc.AddObject("upstream", &n.Upstream)
}

// MarshalLogObject logs the Redis URL or the sentinels or cluster nodes,
// the fail mode and a redacted password.
func (r *Redis) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddString("mode", r.Target().Mode())
	switch {
	case r.Sentinel != nil:
		enc.AddString("master", r.Sentinel.Master)
		if err := enc.AddArray("sentinels", stringList(r.Sentinel.Addrs)); err != nil {
			return err
		}
	case r.Cluster != nil:
		if err := enc.AddArray("nodes", stringList(r.Cluster.Addrs)); err != nil {
			return err
		}
	default:
		enc.AddString("url", r.URL)
	}
	enc.AddString("password", r.Password.String())
	enc.AddString("fail_mode", string(r.FailMode))
	return nil
}

// MarshalLogObject logs the rate.
func (r Rate) MarshalLogObject(enc zapcore.ObjectEncoder) error {
	enc.AddFloat64("rps", r.RPS)
	enc.AddInt("burst", r.Burst)
	return nil
}

type stringList []string

func (l stringList) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, s := range l {
		enc.AppendString(s)
	}
	return nil
}

type keysArray []Key

func (l keysArray) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for i := range l {
		if err := enc.AppendObject(&l[i]); err != nil {
			return err
		}
	}
	return nil
}
