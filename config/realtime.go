// This file holds the schema of the realtime section.

package config

import "time"

// Realtime configures the WebSocket stream that clients open at
// /api/v1/ws, served from the gateway's shared upstream connections.
type Realtime struct {
	// ClientQueue is how many frames may wait for one client; a client
	// that falls further behind is closed (1008, "slow consumer") so that
	// it never delays the others. Default 256.
	ClientQueue int `yaml:"client_queue" json:"client_queue"`
	// PingInterval is how often the gateway pings its clients; one that
	// does not answer within the interval is closed. Default 15s.
	PingInterval time.Duration `yaml:"ping_interval" json:"ping_interval"`
	// TeamConnections bounds the WebSocket connections one team holds at
	// once (429 beyond). Default 100.
	TeamConnections int `yaml:"team_connections" json:"team_connections"`
	// Grace is how long a feed no client wants any more stays subscribed
	// upstream. Default 30s.
	Grace time.Duration `yaml:"grace" json:"grace"`
	// LatestFromStream answers /api/v1/reports/latest of a streamed feed
	// from the newest report the stream delivered, with no upstream call.
	// Default true.
	LatestFromStream bool `yaml:"latest_from_stream" json:"latest_from_stream"`
	// Share shares each network's upstream WebSocket connections with the
	// other replicas through the Redis of ratelimit.redis: one replica
	// holds each chunk of feeds (a lease in Redis) and publishes its
	// frames to the others. Only with ratelimit.backend redis. Default
	// true.
	Share bool `yaml:"share" json:"share"`
	// ShareLease is how long a chunk's lease lasts unless its holder
	// renews it (every third of it): a crashed holder's chunks are taken
	// over within about this. Default 3s, at least 300ms.
	ShareLease time.Duration `yaml:"share_lease" json:"share_lease"`
	// ClientOrigins are the HA origins the gateway advertises to its
	// clients (HEAD / answers X-Cll-Available-Origins: {001,002}), so that
	// an SDK in HA mode holds one connection per origin, as it does to the
	// upstream; an upgrade naming another origin (X-Cll-Origin) is 400. An
	// empty list advertises none (SDKs fall back to one connection).
	// Default ["001", "002"].
	ClientOrigins []string `yaml:"client_origins" json:"client_origins"`
	// DrainDelay is how long a draining replica (SIGTERM) keeps streaming
	// to its clients after /readyz turned 503, so that a balancer stops
	// routing to it, before it closes them in steps; at most half of
	// server.shutdown_timeout. Default 5s.
	DrainDelay time.Duration `yaml:"drain_delay" json:"drain_delay"`
	// ResumeWindow is how long after the gateway ended or lost a client's
	// connection a reconnect of the same key with the same streams gets
	// the reports it missed before live ones. 0 disables resume. Default
	// 60s.
	ResumeWindow time.Duration `yaml:"resume_window" json:"resume_window"`
	// ResumeRecordsPerTeam bounds the resume records one team has on a
	// replica (one per client identity: key, network, streams, origin) of
	// clients that left it on their own; beyond it the team's oldest such
	// record is dropped. The records of clients streaming there and those
	// its drain moved are outside the bound. Default 200.
	ResumeRecordsPerTeam int `yaml:"resume_records_per_team" json:"resume_records_per_team"`
	// ResumeRecords bounds the same records of a replica, all teams
	// together; beyond it the oldest is dropped. Default 5000.
	ResumeRecords int `yaml:"resume_records" json:"resume_records"`
	// BackfillMax bounds the gap of a stream that is filled from REST when
	// its frames stop and start again (upstream drop or outage, a holder's
	// crash): the newest BackfillMax of a longer gap are filled, the rest
	// counted and logged. 0 disables backfill. Default 2m.
	BackfillMax time.Duration `yaml:"backfill_max" json:"backfill_max"`
	// SinceMax bounds how far back a client may ask for its streams with
	// /api/v1/ws?since=: a since further back is 400. The replay is read
	// from the archive where it holds the seconds, else fetched from the
	// upstream at the fills' share of the budget, and held in memory for
	// the client until it is in order. 0 refuses every since. Default
	// 15m, at most 24h.
	SinceMax time.Duration `yaml:"since_max" json:"since_max"`
}
