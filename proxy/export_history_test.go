package proxy

import "time"

// SetHistoryFillBounds sets the bounds of one bars request's fill on every
// network of g whose archive is given (SetHistory), for tests that reach
// them with a few small pages: its pages, and a wait long enough never to
// be the bound that stops it on a loaded machine.
func SetHistoryFillBounds(g *Gateway, maxPages, pageLimit int) {
	for _, n := range g.networks {
		if st := n.history.cur.Load(); st != nil {
			cp := *st
			cp.fill.MaxPages, cp.fill.PageLimit, cp.fill.Wait = maxPages, pageLimit, 10*time.Minute
			n.history.cur.Store(&cp)
		}
	}
}
