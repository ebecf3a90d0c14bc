// This file holds the gateway's policy: the reloadable part of the
// configuration (teams, keys, limits, lifetimes), parsed once into a value
// that requests read without a lock, and Reload, which swaps it.

package proxy

import (
	"time"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/ratelimit"
)

// policy is the reloadable part of the configuration, parsed once.
type policy struct {
	keys             *auth.KeyStore
	verifier         *auth.Verifier
	teams            map[string]*teamPolicy
	anonymousCatalog bool
	anonymousRate    ratelimit.Limit // per client address
	catalogTTL       time.Duration
	latestTTL        time.Duration
	latestFromStream bool
	latestMaxStale   time.Duration
	latestMaxWait    time.Duration
	negativeTTL      time.Duration
	audit            bool
}

type teamPolicy struct {
	rate     limitPolicy
	keyRates map[string]limitPolicy
	daily    int64
	quota    limitPolicy            // the daily quota's Limit as the Quota reports it
	creds    map[string]*credential // own upstream credentials by network
}

// limitPolicy is a limit with what admission derives from it, made once
// per policy: its limiter key and the RateLimit-Policy member it
// advertises.
type limitPolicy struct {
	limit  ratelimit.Limit
	key    string // the limiter's key
	header string // RateLimit-Policy member; "" when unlimited
}

func newLimitPolicy(l ratelimit.Limit, key, name string) limitPolicy {
	return limitPolicy{limit: l, key: key, header: ratelimit.Decision{Limit: l}.PolicyValue(name)}
}

// buildPolicy parses the reloadable part of cfg.
func (g *Gateway) buildPolicy(cfg *config.Config) (*policy, error) {
	// Each team's share of the replay record: what its rate can fill, or
	// an equal part of what the rated teams leave (auth.ReplayShares).
	need := make(map[string]int, len(cfg.Teams))
	for _, t := range cfg.Teams {
		if !t.Rate.Unlimited() {
			need[t.Name] = auth.ReplayNeed(t.Rate.RPS, t.Rate.Burst, cfg.Auth.MaxSkew)
			continue
		}
		sum := 0 // every key limited: their sum
		for _, k := range t.Keys {
			if k.Rate.Unlimited() {
				sum = 0
				break
			}
			sum += auth.ReplayNeed(k.Rate.RPS, k.Rate.Burst, cfg.Auth.MaxSkew)
		}
		need[t.Name] = sum
	}
	pol := &policy{
		teams:            map[string]*teamPolicy{},
		anonymousCatalog: cfg.Auth.AnonymousCatalog,
		anonymousRate:    ratelimit.Limit{Rate: cfg.Auth.AnonymousRate.RPS, Burst: cfg.Auth.AnonymousRate.Burst},
		catalogTTL:       cfg.Cache.CatalogTTL,
		latestTTL:        cfg.Cache.LatestTTL,
		latestFromStream: cfg.Realtime.LatestFromStream,
		latestMaxStale:   cfg.Cache.LatestMaxStale,
		latestMaxWait:    cfg.Cache.LatestMaxWait,
		negativeTTL:      cfg.Cache.NegativeTTL,
		audit:            cfg.Log.Audit,
		verifier: auth.NewVerifier(auth.VerifierConfig{
			MaxSkew: cfg.Auth.MaxSkew, ReplayProtection: cfg.Auth.ReplayProtection, ReplayGrace: cfg.Auth.ReplayGrace, Now: g.now,
			Shared: g.replayStore, SharedFailed: g.replayStoreFailed,
			// One record for the gateway's life: a reload that changes the
			// checks opens no window for a replay.
			Record: g.replayRecord, ReplayMaxEntries: cfg.Auth.ReplayMaxEntries,
			ReplayShares: auth.ReplayShares(cfg.Auth.ReplayMaxEntries, need),
		}),
	}
	teams := make([]auth.Team, 0, len(cfg.Teams))
	for _, t := range cfg.Teams {
		at := auth.Team{Name: t.Name, Networks: t.Networks, All: t.AllFeeds(), Feeds: t.Feeds.IDs()}
		tp := &teamPolicy{
			rate:     newLimitPolicy(ratelimit.Limit{Rate: t.Rate.RPS, Burst: t.Rate.Burst}, ratelimit.TeamRateKey(t.Name), "team"),
			keyRates: map[string]limitPolicy{},
			daily:    t.DailyQuota,
			creds:    map[string]*credential{},
		}
		if t.DailyQuota > 0 {
			// As the Quota interface documents its Decision's Limit.
			tp.quota = newLimitPolicy(ratelimit.Limit{Rate: float64(t.DailyQuota) / 86400, Burst: int(t.DailyQuota)}, ratelimit.DailyKey(t.Name), "daily")
		}
		for _, k := range t.Keys {
			ak := auth.Key{ID: k.ID, Cert: k.ClientCert.Rule()}
			for _, s := range k.Secrets() {
				ak.Secrets = append(ak.Secrets, s.Reveal())
			}
			at.Keys = append(at.Keys, ak)
			if !k.Rate.Unlimited() {
				tp.keyRates[k.ID] = newLimitPolicy(ratelimit.Limit{Rate: k.Rate.RPS, Burst: k.Rate.Burst}, ratelimit.KeyRateKey(t.Name, k.ID), "key")
			}
		}
		for net, c := range t.Upstream {
			if c != nil && c.APIKey != "" {
				tp.creds[net] = &credential{scope: t.Name, key: c.APIKey, secret: []byte(c.Secret().Reveal()),
					part: cfg.TeamPartition(&t, net)}
			}
		}
		teams = append(teams, at)
		pol.teams[t.Name] = tp
	}
	ks, err := auth.NewKeyStore(teams)
	if err != nil {
		return nil, err
	}
	pol.keys = ks
	return pol, nil
}

// Reload applies the teams, keys, limits and lifetimes of cfg, to open
// WebSocket connections too: one whose key or team is gone is closed
// (1008, the reason named), a stream no longer permitted stops at once. Listeners,
// networks and upstreams are fixed at start and not changed by a reload;
// telling the operator so is the caller's business. An invalid cfg is
// refused, and the configuration in force stays.
func (g *Gateway) Reload(cfg *config.Config) error {
	pol, err := g.buildPolicy(cfg)
	if err != nil {
		return err
	}
	g.pol.Store(pol)
	// Open WebSockets were admitted under the old policy: check each again.
	g.streams.Recheck()
	return nil
}
