// This file holds the schema of the auth section.

package config

import "time"

// Auth configures the checks made on client requests.
type Auth struct {
	// MaxSkew is the largest difference allowed between a request's
	// X-Authorization-Timestamp and the gateway's clock. Default 5s.
	MaxSkew time.Duration `yaml:"max_skew" json:"max_skew"`
	// ReplayProtection refuses a signature seen before within MaxSkew.
	// Default true.
	ReplayProtection bool `yaml:"replay_protection" json:"replay_protection"`
	// ReplayGrace is how long after its first use a signature may be used
	// again: identical requests that a client sends at once (the official
	// SDKs do, from parallel calls) carry identical signatures. Later uses,
	// up to MaxSkew, are refused as replays. Default 1s; 0 refuses every
	// repeat.
	ReplayGrace time.Duration `yaml:"replay_grace" json:"replay_grace"`
	// AnonymousCatalog serves the unsigned catalog (/api/v1/discovery)
	// without authentication, as the upstream does. Default true.
	AnonymousCatalog bool `yaml:"anonymous_catalog" json:"anonymous_catalog"`
	// AnonymousRate limits unsigned catalog requests per client address
	// (the connection's IP address; X-Forwarded-For is not trusted).
	// Default {rps: 20, burst: 40}; rps 0 lifts the limit.
	AnonymousRate Rate `yaml:"anonymous_rate" json:"anonymous_rate"`
	// ReplayMaxEntries bounds the replica's record of signatures seen
	// (about 64 bytes each). Only admitted requests are recorded, so it
	// holds about the admitted rate times 2×max_skew; when it is full, new
	// signatures are refused with 503 rather than accepted unrecorded.
	// Default 1000000.
	ReplayMaxEntries int `yaml:"replay_max_entries" json:"replay_max_entries"`
}
