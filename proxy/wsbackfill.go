package proxy

import (
	"context"
	"errors"
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
	return n.backfill
}

// errBackfillEmpty is returned for a backfill without feeds.
var errBackfillEmpty = errors.New("backfill: no streams")

func (n *network) backfill(ctx context.Context, feeds []string, ts int64) (map[string][]byte, error) {
	if len(feeds) == 0 {
		return nil, errBackfillEmpty
	}
	records, _, err := n.fetchBulk(ctx, n.org, feeds, ts)
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
