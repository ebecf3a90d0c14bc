package realtime

import "slices"

// planOwn is the plan of a hub's own upstream connections, a pure function
// of what they carry and what is wanted: current are the feeds each own
// chunk carries now (in the hub's order), wanted the feeds to carry on own
// connections, perConn the feeds one chunk may carry and maxChunks how many
// own chunks the budget allows. It returns the feeds each chunk carries
// next, sorted (the current chunks first, in order, an empty one to be
// closed; then new chunks), and how many wanted feeds are left over the
// budget. A chunk keeps every feed of its own still wanted (no switch for
// them); the room left in the current chunks, then new chunks, take the
// others, in sorted order.
func planOwn(current [][]string, wanted map[string]bool, perConn, maxChunks int) (next [][]string, over int) {
	next = make([][]string, len(current))
	carried := make(map[string]bool, len(wanted))
	for i, feeds := range current {
		for _, id := range feeds {
			if wanted[id] && !carried[id] {
				next[i] = append(next[i], id)
				carried[id] = true
			}
		}
	}
	var missing []string
	for id := range wanted {
		if !carried[id] {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	for i := range next {
		if len(next[i]) > 0 || len(missing) > 0 {
			if n := min(perConn-len(next[i]), len(missing)); n > 0 {
				next[i] = append(next[i], missing[:n]...)
				missing = missing[n:]
			}
		}
	}
	for len(missing) > 0 && len(next) < maxChunks {
		n := min(perConn, len(missing))
		next = append(next, slices.Clone(missing[:n]))
		missing = missing[n:]
	}
	for _, feeds := range next {
		slices.Sort(feeds)
	}
	return next, len(missing)
}
