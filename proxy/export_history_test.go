package proxy

// SetHistoryFillBounds sets the bounds of one bars request's fill on every
// network of g whose archive is given (SetHistory), for tests that reach
// them with a few small pages.
func SetHistoryFillBounds(g *Gateway, maxPages, pageLimit int) {
	for _, n := range g.networks {
		if st := n.history.cur.Load(); st != nil {
			cp := *st
			cp.fill.MaxPages, cp.fill.PageLimit = maxPages, pageLimit
			n.history.cur.Store(&cp)
		}
	}
}
