package proxy

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"streamgate/feedid"
	"streamgate/realtime"
)

// Backfill returns what the real-time hub of network name fetches the
// seconds of a stream gap with (realtime.Config.Backfill): the bulk
// reports of feeds at ts, through the same path as a client's bulk request
// (the cache and the shared tier first, so that replicas filling the same
// gap share the calls, then the upstream within its budget, the DON's
// signatures verified), each record wrapped as a stream frame,
// {"report":<record>}, the upstream's bytes unchanged, signed with the
// credential of the hub's stream partition part ("" the organisation's).
// nil for a network the gateway does not serve or a partition it does not
// have.
func (g *Gateway) Backfill(name, part string) func(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
	n := g.networks[name]
	if n == nil || n.partitionCred(part) == nil {
		return nil
	}
	fill := func(ctx context.Context, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
		return n.backfill(ctx, n.partitionCred(part), feeds, ts)
	}
	if g.tracer == nil {
		return fill
	}
	// A backfill runs for the hub, outside any request: its span is the
	// root of a trace of its own, sampled by ratio like a request, with
	// the shared tier, budget wait and upstream attempts of its bulk call
	// below it.
	return func(ctx context.Context, feeds []feedid.ID, ts int64) (_ map[feedid.ID][]byte, err error) {
		ctx, span := g.tracer.Start(ctx, "ws backfill", trace.WithAttributes(
			attribute.String("streamgate.network", name), attribute.Int("streamgate.streams", len(feeds)),
			attribute.Int64("streamgate.second", ts)))
		defer func() { endSpan(span, err) }()
		return fill(ctx, feeds, ts)
	}
}

// DiscoveryBudget returns what the real-time hub of network name waits on
// before each origin discovery (realtime.Config.DiscoveryBudget): a token
// of the network's upstream budget under the key "root" (HEAD /), shared
// by the replicas with the Redis budget, under the credential of stream
// partition part (each credential has its own budget). nil for a network
// the gateway does not serve or a partition it does not have.
func (g *Gateway) DiscoveryBudget(name, part string) func(ctx context.Context) error {
	n := g.networks[name]
	if n == nil || n.partitionCred(part) == nil {
		return nil
	}
	return func(ctx context.Context) error {
		return n.up.budget.Wait(ctx, budgetKey("root", n.partitionCred(part)), n.up.limit)
	}
}

// errBackfillEmpty is returned for a backfill without feeds.
var errBackfillEmpty = errors.New("backfill: no streams")

func (n *network) backfill(ctx context.Context, cred *credential, feeds []feedid.ID, ts int64) (map[feedid.ID][]byte, error) {
	if len(feeds) == 0 {
		return nil, errBackfillEmpty
	}
	if cred == nil {
		return nil, errors.New("proxy: backfill: the stream partition has no credential now")
	}
	records, _, err := n.bulk.fetch(ctx, cred, feedid.Strings(feeds), ts, true)
	if err != nil {
		return nil, err
	}
	// The records are keyed by the streams asked for (checker.splitBulk).
	out := make(map[feedid.ID][]byte, len(records))
	for id, rec := range records {
		out[feedid.ID(id)] = streamFrame(rec)
	}
	return out, nil
}

// streamFrame wraps a report record as the WebSocket stream sends it.
func streamFrame(record []byte) []byte {
	f := make([]byte, 0, len(reportPrefix)+len(record)+1)
	return append(append(append(f, reportPrefix...), record...), '}')
}

// errResumeQuota refuses a second of a resume fill: the team's daily quota
// is spent.
var errResumeQuota = errors.New("proxy: resume fill: the team's daily quota is exhausted")

// resumeCharge is what a resumed stream client's fill costs its team: each
// second fetched for it takes one unit of the team's daily quota, the bulk
// request at that second the client could have made itself. When the
// quota is spent the fill stops there and the client goes on live; a team
// without a daily quota is not charged (its fills are still bounded by
// realtime.resume_window and take at most half of the bulk budget,
// upstream.waitFillShare).
func (n *network) resumeCharge(team string) realtime.FillCharge {
	return func(ctx context.Context) error {
		tp := n.policy().teams[team]
		if tp == nil || tp.daily <= 0 {
			return nil
		}
		d, err := n.quota.Take(ctx, tp.quota.key, tp.daily, n.now())
		if err != nil {
			return fmt.Errorf("proxy: resume fill charge: %w", err)
		}
		if !d.Allowed {
			n.metrics.limited(team, "daily")
			return errResumeQuota
		}
		return nil
	}
}
