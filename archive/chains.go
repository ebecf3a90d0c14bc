package archive

import (
	"context"
	"time"

	"go.uber.org/zap"

	"streamgate/feedid"
)

// The stream's claims. The real-time hub vouches, for each report it
// hands on, whether it is the second after the one it handed before
// (realtime.Frame.Follows). The Writer turns that into coverage only for
// what it stored itself: per stream it keeps the last report of the
// stream it stored (the chain's tail); a report that follows the tail
// extends the claim [follows, its second]; one that does not (the hub
// vouched for nothing, or the report it follows was dropped or never
// kept) starts a new chain. The claims are recorded in the store every
// CoverEvery, so that a stream costs the store one coverage write every
// few seconds, not one per report: on Pebble (a CoverageBatcher) every
// stream's spans of a round in one synced batch, on PostgreSQL one
// AddCoverage (a transaction under the stream's lock) per span. A claim the
// store refuses is kept and tried again at the next recording (at most
// maxClaimsKept per stream): coverage lags, never leads, what is stored.

// maxClaimsKept bounds the spans of one stream waiting to be recorded
// (those the store refused, and those a break closed): beyond it the
// oldest are forgotten, their seconds then a hole like any other.
const maxClaimsKept = 64

// chainIdle is how long a stream's chain with nothing to record is kept
// after its last report: a stream the hub carries again later starts a
// new chain, as it would anyway (its first report follows nothing).
const chainIdle = 10 * time.Minute

type chainKey struct {
	network string
	stream  feedid.ID
}

// chain is what the Writer knows of one stream's reports from the hub;
// guarded by Writer.claimMu.
type chain struct {
	tail   uint32      // the last report of the stream stored; 0: none
	open   *claimSpan  // the span being extended, not recorded yet
	closed []claimSpan // spans to record, oldest first
	fresh  bool        // the next span starts a new chain (the first, or after a break)
	seen   time.Time   // when a report of the stream was last stored
}

// claimSpan is a span to record; first marks the first span of a chain
// (Writer.OnChain is told once it is recorded).
type claimSpan struct {
	Span
	first bool
}

// chain extends the claims with the stream reports of batch, stored.
func (w *Writer) chain(batch []item) {
	now := time.Now()
	w.claimMu.Lock()
	defer w.claimMu.Unlock()
	for i := range batch {
		it := &batch[i]
		if !it.stream {
			continue
		}
		k := chainKey{it.r.Network, it.r.Stream}
		c := w.claims[k]
		if c == nil {
			c = &chain{fresh: true}
			w.claims[k] = c
		}
		ts := it.r.ObservationsTimestamp
		if ts <= c.tail {
			continue // not newer than the tail: never (the hub hands each stream in order)
		}
		if it.follows != 0 && it.follows == c.tail {
			if c.open != nil && c.open.To == it.follows {
				c.open.To = ts
			} else {
				c.closeOpen()
				c.open = &claimSpan{Span: Span{From: it.follows, To: ts}, first: c.fresh}
				c.fresh = false
			}
		} else {
			// A break: what comes next is a new chain.
			c.closeOpen()
			c.fresh = true
		}
		c.tail, c.seen = ts, now
	}
}

// closeOpen moves the open span to those to record.
func (c *chain) closeOpen() {
	if c.open == nil {
		return
	}
	c.closed = append(c.closed, *c.open)
	c.open = nil
	if n := len(c.closed) - maxClaimsKept; n > 0 {
		c.closed = append(c.closed[:0], c.closed[n:]...)
	}
}

// recordLoop records the claims every CoverEvery until Close.
func (w *Writer) recordLoop() {
	defer close(w.recorded)
	tick := time.NewTicker(w.o.CoverEvery)
	defer tick.Stop()
	for {
		select {
		case <-w.quit:
			return
		case <-tick.C:
			w.recordClaims(context.Background())
		}
	}
}

// pendingClaim is one stream's spans taken for a recording.
type pendingClaim struct {
	key   chainKey
	spans []claimSpan
}

// recordClaims records every stream's claims, each call within Timeout:
// the open span too (the chain goes on from its tail, and the next span,
// touching it, is merged by the store). A stream's spans are recorded in
// order, so that a chain's first span is recorded after those before it
// and OnChain's hole is only what is missing. At the first failure the
// round stops (the store is down or slow: the next round tries again);
// what was not recorded is put back, oldest first. A CoverageBatcher
// records the round in one call (recordBatch).
func (w *Writer) recordClaims(ctx context.Context) {
	w.coverMu.Lock()
	defer w.coverMu.Unlock()
	now := time.Now()
	var todo []pendingClaim
	w.claimMu.Lock()
	for k, c := range w.claims {
		c.closeOpen()
		if len(c.closed) == 0 {
			if now.Sub(c.seen) > chainIdle {
				delete(w.claims, k)
			}
			continue
		}
		todo = append(todo, pendingClaim{k, c.closed})
		c.closed = nil
	}
	w.claimMu.Unlock()
	if b, ok := w.store.(CoverageBatcher); ok {
		w.recordBatch(ctx, b, todo, now)
		return
	}
	var failed error
	for _, p := range todo {
		left := p.spans
		for failed == nil && len(left) > 0 {
			sp := left[0]
			cctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
			failed = w.store.AddCoverage(cctx, p.key.network, p.key.stream, sp.Span)
			cancel()
			if failed != nil {
				w.errs.Add(1)
				w.log.Debug("archive: the stream's spans were not recorded; tried again", zap.String("network", p.key.network),
					zap.Stringer("span", sp.Span), zap.Error(failed))
				break
			}
			left = left[1:]
			if sp.first && w.o.OnChain != nil {
				w.o.OnChain(p.key.network, p.key.stream, sp.From)
			}
		}
		if len(left) > 0 {
			w.putBack(p.key, left, now)
		}
	}
}

// recordBatch records every span of todo in one AddCoverages, within
// Timeout: one synced write a round, not one per stream. It fails whole:
// every span is put back, for the next round.
func (w *Writer) recordBatch(ctx context.Context, b CoverageBatcher, todo []pendingClaim, now time.Time) {
	var all []StreamSpan
	for _, p := range todo {
		for _, sp := range p.spans {
			all = append(all, StreamSpan{Network: p.key.network, Stream: p.key.stream, Span: sp.Span})
		}
	}
	if len(all) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, w.o.Timeout)
	err := b.AddCoverages(cctx, all)
	cancel()
	if err != nil {
		w.errs.Add(1)
		w.log.Debug("archive: the streams' spans were not recorded; tried again", zap.Int("spans", len(all)), zap.Error(err))
		for _, p := range todo {
			w.putBack(p.key, p.spans, now)
		}
		return
	}
	if w.o.OnChain == nil {
		return
	}
	for _, p := range todo {
		for _, sp := range p.spans {
			if sp.first {
				w.o.OnChain(p.key.network, p.key.stream, sp.From)
			}
		}
	}
}

// putBack returns spans not recorded to the stream's chain, before those
// claimed since.
func (w *Writer) putBack(k chainKey, spans []claimSpan, now time.Time) {
	w.claimMu.Lock()
	defer w.claimMu.Unlock()
	c := w.claims[k]
	if c == nil {
		c = &chain{fresh: true, seen: now}
		w.claims[k] = c
	}
	c.closed = append(append([]claimSpan(nil), spans...), c.closed...)
	if n := len(c.closed) - maxClaimsKept; n > 0 {
		c.closed = append(c.closed[:0], c.closed[n:]...)
	}
}
