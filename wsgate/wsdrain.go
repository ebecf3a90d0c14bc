package wsgate

import (
	"context"
	"slices"
	"strings"
	"time"

	"streamgate/feedid"
	"streamgate/internal/ctxsleep"

	"go.uber.org/zap"
)

// Drain of the stream clients (Gate.DrainStreams): a replica that
// shuts down closes its clients with 1001 in steps rather than all at
// once, and never both connections of an HA client together.
const (
	// drainSteps: the first connections of every client are closed in
	// this many steps, drainStep apart, so that their reconnects spread.
	drainSteps = 10
	drainStep  = 100 * time.Millisecond
	// drainPairWait bounds how long the second connection of an HA client
	// waits for the first to have reconnected (here or on another
	// replica).
	drainPairWait = 10 * time.Second
	// drainPoll is how often the reconnect of a first connection is
	// looked for.
	drainPoll = 100 * time.Millisecond
)

// reasonDrain is the close reason of a drained client.
const reasonDrain = "the gateway is restarting: reconnect"

// pairKey groups the connections of one HA client: the same key, network
// and streams, each naming an origin (X-Cll-Origin). A connection that
// names none is a client of its own, whatever it shares with others.
func (c *wsClient) pairKey() string {
	feeds := feedid.Strings(c.feeds)
	slices.Sort(feeds)
	return c.network + "\x00" + c.keyID + "\x00" + strings.Join(feeds, ",")
}

// DrainStreams closes every open stream client (1001, "reconnect"): the
// first connection of each client in steps, then each HA client's other
// connections once the first has reconnected, anywhere (its resume record,
// shared through Redis, names a newer connection), or drainPairWait has
// passed. When ctx ends the rest are closed at once. It returns when every
// client was told to close.
func (g *Gate) DrainStreams(ctx context.Context) {
	tc := g.conns
	tc.mu.Lock()
	groups := map[string][]*wsClient{}
	var order []string
	var alone []*wsClient // no origin named: not one of a pair
	for c := range tc.clients {
		if c.origin == "" {
			alone = append(alone, c)
			continue
		}
		k := c.pairKey()
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], c)
	}
	tc.mu.Unlock()
	if len(order) == 0 && len(alone) == 0 {
		return
	}
	g.metrics.wsDrain(1)
	defer g.metrics.wsDrain(-1)
	slices.Sort(order)
	g.log.Info("closing the stream clients in steps", zap.Int("clients", len(order)+len(alone)))

	firsts := alone
	type second struct{ c, first *wsClient }
	var seconds []second
	for _, k := range order {
		cs := groups[k]
		slices.SortFunc(cs, func(a, b *wsClient) int { return strings.Compare(a.origin, b.origin) })
		firsts = append(firsts, cs[0])
		for _, c := range cs[1:] {
			seconds = append(seconds, second{c, cs[0]})
		}
	}
	per := max(1, (len(firsts)+drainSteps-1)/drainSteps)
	closedAt := time.Now()
	for i := 0; i < len(firsts); i += per {
		for _, c := range firsts[i:min(i+per, len(firsts))] {
			c.drainNow()
		}
		if i+per < len(firsts) && !ctxsleep.Sleep(ctx, drainStep) {
			for _, c := range firsts[i+per:] {
				c.drainNow()
			}
			break
		}
	}
	// The others, once their first has reconnected.
	deadline := time.Now().Add(drainPairWait)
	for len(seconds) > 0 {
		kept := seconds[:0]
		for _, p := range seconds {
			if time.Now().After(deadline) || ctx.Err() != nil || g.reconnected(ctx, p.first, closedAt) {
				p.c.drainNow()
				continue
			}
			kept = append(kept, p)
		}
		seconds = kept
		if len(seconds) > 0 {
			ctxsleep.Sleep(ctx, drainPoll)
		}
	}
}

// reconnected reports whether first, a connection closed at closedAt, has
// connected again, here or on another replica: a resume record of its
// identity written since by another connection. Without resume records,
// nothing tells: false.
func (g *Gate) reconnected(ctx context.Context, first *wsClient, closedAt time.Time) bool {
	if g.resume == nil || first.mark == nil {
		return false
	}
	return g.resume.reconnectedSince(ctx, first.mark, closedAt)
}

// drainNow tells the client's handler to close it (once).
func (c *wsClient) drainNow() {
	c.draining.Store(true)
	signal(c.ctl)
}
