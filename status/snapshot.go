// This file holds the Snapshot, what the status page and /status.json show,
// section by section; build.go computes it.

package status

import (
	"math"
	"time"
)

// Snapshot is what the page and /status.json show. Counts are since the
// process started unless the field says otherwise; rates and ratios are
// over the window named in the field. Nothing in it is secret.
type Snapshot struct {
	// Health is the headline: well, or degraded with every reason.
	Health         Health    `json:"health"`
	Version        string    `json:"version"`
	SampledAt      time.Time `json:"sampled_at"`
	SampleInterval float64   `json:"sample_interval_seconds"`
	Window         float64   `json:"window_seconds"` // the time the series cover
	Config         Config    `json:"config"`
	Cache          Cache     `json:"cache"`
	Networks       []Network `json:"networks"`
	Teams          []Team    `json:"teams"`
	// Archive is the archive's state; absent when it is off.
	Archive *Archive `json:"archive,omitempty"`
	// HitRatio is the cache hit ratio per sample interval, oldest first.
	HitRatio []float64 `json:"hit_ratio_series"`
	// FreeShare is Cache.Free.Share per sample interval, oldest first.
	FreeShare []float64 `json:"no_upstream_call_series"`
}

// NoUpstreamCall counts the answers to cache lookups that cost no upstream
// call, by where they came from. Share is their part of all lookups
// (Free / Lookups).
type NoUpstreamCall struct {
	Lookups int64   `json:"lookups"`
	Free    int64   `json:"answers"`
	Share   float64 `json:"share"`
	// Memory: a fresh entry (or a "no data yet" answer) in this replica's
	// memory (X-Cache: HIT).
	Memory int64 `json:"memory"`
	// Shared: a miss in memory filled from the shared tier in Redis, an
	// entry another replica fetched (X-Cache: MISS, no upstream call).
	// Counted for all networks together: 0 per network.
	Shared int64 `json:"shared"`
	// Stream: latest answered from the WebSocket stream (X-Cache: STREAM).
	Stream int64 `json:"stream"`
	// Stale: a held entry past its lifetime, answered while it is
	// refreshed (X-Cache: STALE).
	Stale int64 `json:"stale"`
	// Coalesced: a request that waited for another's upstream call
	// (X-Cache: COALESCED).
	Coalesced int64 `json:"coalesced"`
}

// noUpstreamCall computes the answers free of an upstream call from the
// cache results by result and the fills answered by the shared tier.
func noUpstreamCall(res map[string]float64, shared float64) NoUpstreamCall {
	var lookups float64
	for _, v := range res {
		lookups += v
	}
	shared = math.Max(math.Min(shared, res["miss"]), 0) // a shared-tier fill is a miss in memory
	f := NoUpstreamCall{Lookups: int64(lookups), Memory: int64(res["hit"] + res["negative"]), Shared: int64(shared),
		Stream: int64(res["stream"]), Stale: int64(res["stale"]), Coalesced: int64(res["coalesced"])}
	f.Free = f.Memory + f.Shared + f.Stream + f.Stale + f.Coalesced
	f.Share = ratio(float64(f.Free), lookups)
	return f
}

// Config is the configuration in force.
type Config struct {
	LoadedAt   time.Time `json:"loaded_at"`
	LastReload *Reload   `json:"last_reload"` // null: never reloaded
}

// Cache is the response cache (shared by every network).
type Cache struct {
	BytesUsed int64   `json:"bytes_used"`
	MaxBytes  int64   `json:"max_bytes"`
	Lookups   int64   `json:"lookups"`
	Hits      int64   `json:"hits"` // hit, stale and negative answers
	HitRatio  float64 `json:"hit_ratio"`
	// Free are the answers that cost no upstream call, with their parts.
	Free         NoUpstreamCall `json:"no_upstream_call"`
	StaleServed  int64          `json:"stale_served"`
	CallsSaved   int64          `json:"upstream_calls_saved"`
	Coalesced    int64          `json:"coalesced"`
	WindowHitPct float64        `json:"-"`
}

// Network is one network's upstream, budget and hub.
type Network struct {
	Name       string `json:"name"`
	Requests   int64  `json:"requests"`
	CallsSaved int64  `json:"upstream_calls_saved"`
	// The cache's lookups for this network: hit ratio and stale answers.
	HitRatio    float64        `json:"hit_ratio"`
	StaleServed int64          `json:"stale_served"`
	Free        NoUpstreamCall `json:"no_upstream_call"` // without the shared tier's part
	Upstream    Upstream       `json:"upstream"`
	// WS is the upstream WebSocket side, when the network has a hub.
	WS     *WSUpstream `json:"ws_upstream,omitempty"`
	Budget []Endpoint  `json:"budget"`
	Hub    *Hub        `json:"hub,omitempty"`
	// Series per sample interval, oldest first: requests per second,
	// upstream calls per second, and the busiest endpoint's share of its
	// budget (0..1).
	RequestRate  []float64 `json:"requests_per_second_series"`
	UpstreamRate []float64 `json:"upstream_calls_per_second_series"`
	BudgetUse    []float64 `json:"budget_use_series"`
}

// Upstream is the health of a network's upstream.
type Upstream struct {
	// Calls are the REST calls attempted: answered (any status) or failed
	// without an answer (timeout, transport, integrity); Failures are
	// those not answered 2xx.
	Calls        int64      `json:"calls"`
	Failures     int64      `json:"failures"`
	LastSuccess  *time.Time `json:"last_success"` // to within a sample interval
	LastFailure  *time.Time `json:"last_failure"`
	FailureClass string     `json:"last_failure_class,omitempty"` // timeout, transport, integrity, http_503, …
	P50ms        *float64   `json:"p50_ms"`                       // over the last 5 minutes; null without calls
	P99ms        *float64   `json:"p99_ms"`
}

// Endpoint is the upstream budget of one endpoint.
type Endpoint struct {
	Endpoint string  `json:"endpoint"`
	Calls    int64   `json:"calls"`
	Use      float64 `json:"use"` // calls per second over the last minute / budget rps
	Waits    int64   `json:"waits"`
	Refusals int64   `json:"refusals"`
	Pauses   int64   `json:"upstream_429"` // upstream 429 answers: each pauses the endpoint
	// RPS is the configured budget and EffectiveRPS the rate in force (less
	// after upstream 429s); 0 before the endpoint's first call.
	RPS          float64 `json:"rps"`
	EffectiveRPS float64 `json:"effective_rps"`
	// Slowdowns and Recoveries count the changes of the rate in force.
	Slowdowns  int64 `json:"adjustments_down"`
	Recoveries int64 `json:"adjustments_up"`
}

// Slowed reports whether the endpoint's budget runs below its configured
// rate.
func (e Endpoint) Slowed() bool { return e.EffectiveRPS > 0 && e.EffectiveRPS < e.RPS }

// Hub is a network's real-time hub.
type Hub struct {
	Connections     []HubConn        `json:"connections"`
	FeedsWanted     int              `json:"feeds_wanted"`
	FeedsSubscribed int              `json:"feeds_subscribed"`
	FeedsLive       int              `json:"feeds_live"` // carried by a connection that is up
	FeedsUncarried  int              `json:"feeds_uncarried"`
	Subscribers     int              `json:"subscribers"`
	Clients         int64            `json:"clients"`
	Reconnects      map[string]int64 `json:"reconnects"`
	// ClientsByOrigin are the client connections by the HA origin they
	// named ("none" without).
	ClientsByOrigin map[string]int64 `json:"clients_by_origin,omitempty"`
	// Continuity: (stream, second) pairs of gaps filled over REST and not
	// filled; clients resumed and the reports replayed to them; whether
	// the replica is closing its stream clients in steps (shutdown).
	Backfilled int64 `json:"seconds_backfilled"`
	Unfilled   int64 `json:"seconds_unfilled"`
	Resumed    int64 `json:"clients_resumed"`
	Replayed   int64 `json:"reports_replayed"`
	Draining   bool  `json:"draining"`
	// Share is the stream sharing with the other replicas; nil when the
	// hub does not share.
	Share *HubShare `json:"share,omitempty"`
}

// HubShare is a hub's sharing of its upstream connections through Redis.
type HubShare struct {
	Sharing   bool  `json:"sharing"` // false: Redis fails, own connections
	Held      int   `json:"chunks_held"`
	Published int64 `json:"frames_published"`
	Received  int64 `json:"frames_received"`
	Fallbacks int64 `json:"fallbacks"`
}

// HubConn is one upstream WebSocket connection.
type HubConn struct {
	Origin string `json:"origin"`
	State  string `json:"state"`
	Feeds  int    `json:"feeds"`
}

// Team is one team's traffic.
type Team struct {
	Name        string           `json:"name"`
	Requests    int64            `json:"requests"`
	Answers     map[string]int64 `json:"answers"` // by class: 1xx (WebSocket upgrades), 2xx, 3xx, 4xx, 429, 5xx
	RateLimited int64            `json:"rate_limited"`
	// RateLimitedShare is RateLimited / Requests.
	RateLimitedShare float64 `json:"rate_limited_share"`
	// AdmittedToday counts this replica's answers other than 429 since
	// 00:00 UTC.
	AdmittedToday int64 `json:"admitted_today"`
	DailyQuota    int64 `json:"daily_quota"` // 0: none
	// DailyUsed is the daily quota's own count today, shared by every
	// replica with the redis backend; absent when the team has no quota
	// or it could not be read.
	DailyUsed *int64 `json:"daily_used,omitempty"`
	// Today is the usage ledger's row of the team today (UTC), every
	// replica's with Redis; absent when it could not be read.
	Today *UsageToday `json:"usage_today,omitempty"`
}

func isHit(result string) bool { return result == "hit" || result == "stale" || result == "negative" }

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// class is the answer class of a status code: 2xx, 3xx, 4xx, 5xx, with
// 429 apart.
func class(code string) string {
	if code == "429" {
		return "429"
	}
	if len(code) == 3 {
		return code[:1] + "xx"
	}
	return "other"
}

// Archive is the archive on the page: its backend, what it holds (its
// gauges, measured every minute; its streams, every sample) and the
// operator's fills.
type Archive struct {
	ArchiveState
	Reports     int64 `json:"reports"`
	BytesOnDisk int64 `json:"bytes_on_disk"`
	Spans       int64 `json:"coverage_spans"`
	// Streams are the streams it holds, each linked to its candle chart.
	Streams []ArchiveStream `json:"streams"`
}
