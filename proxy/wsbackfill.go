package proxy

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Backfill returns what the real-time hub of network name fetches the
// seconds of a stream gap with (realtime.Config.Backfill): the bulk
// reports of feeds at ts, through the same path as a client's bulk request
// (the cache and the shared tier first, so that replicas filling the same
// gap share the calls, then the upstream within its budget, the DON's
// signatures verified), each record wrapped as a stream frame,
// {"report":<record>}, the upstream's bytes unchanged. nil for a network
// the gateway does not serve.
func (g *Gateway) Backfill(name string) func(ctx context.Context, feeds []string, ts int64) (map[string][]byte, error) {
	n := g.networks[name]
	if n == nil {
		return nil
	}
	if g.tracer == nil {
		return n.backfill
	}
	// A backfill runs for the hub, outside any request: its span is the
	// root of a trace of its own, sampled by ratio like a request, with
	// the shared tier, budget wait and upstream attempts of its bulk call
	// below it.
	return func(ctx context.Context, feeds []string, ts int64) (_ map[string][]byte, err error) {
		ctx, span := g.tracer.Start(ctx, "ws backfill", trace.WithAttributes(
			attribute.String("streamgate.network", name), attribute.Int("streamgate.streams", len(feeds)),
			attribute.Int64("streamgate.second", ts)))
		defer func() { endSpan(span, err) }()
		return n.backfill(ctx, feeds, ts)
	}
}

// errBackfillEmpty is returned for a backfill without feeds.
var errBackfillEmpty = errors.New("backfill: no streams")

func (n *network) backfill(ctx context.Context, feeds []string, ts int64) (map[string][]byte, error) {
	if len(feeds) == 0 {
		return nil, errBackfillEmpty
	}
	records, _, err := n.bulk.fetch(ctx, n.org, feeds, ts)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(records))
	for id, rec := range records {
		out[id] = streamFrame(rec)
	}
	return out, nil
}

// streamFrame wraps a report record as the WebSocket stream sends it.
func streamFrame(record []byte) []byte {
	f := make([]byte, 0, len(reportPrefix)+len(record)+1)
	return append(append(append(f, reportPrefix...), record...), '}')
}
