package wsgate

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestResumeIndexBounds: the oldest written record of a team goes beyond
// its bound, the oldest of all beyond the total; a record written again
// is the newest; expired records are forgotten.
func TestResumeIndexBounds(t *testing.T) {
	x := newResumeIndex(2, 3)
	t0 := time.Unix(1000, 0)
	exp := t0.Add(time.Minute)
	assert.Empty(t, x.put("a1", "a", "c1", exp, false))
	assert.Empty(t, x.put("a2", "a", "c2", exp, false))
	assert.Empty(t, x.put("a1", "a", "c3", exp, false)) // written again: a2 is the oldest now
	assert.Equal(t, []resumeDrop{{"a2", "c2", "team"}}, x.put("a3", "a", "c4", exp, false))
	assert.Empty(t, x.put("b1", "b", "c5", exp, false))
	assert.Equal(t, []resumeDrop{{"a1", "c3", "total"}}, x.put("b2", "b", "c6", t0.Add(time.Second), false))
	assert.Equal(t, 3, x.len())
	x.remove("a3")
	assert.Equal(t, 2, x.len())
	x.prune(t0.Add(2 * time.Second))
	assert.Equal(t, 1, x.len(), "b2 expired")
	assert.Empty(t, x.put("b3", "b", "c7", exp, false))
	assert.Equal(t, 2, x.len())
}

// TestResumeIndexLeavesOpenAndDrained: the records of identities with a
// connection open here, and those a drain's closes wrote, are neither
// dropped nor counted against the bounds; an identity whose last
// connection ended on its own is bounded again from its next write.
func TestResumeIndexLeavesOpenAndDrained(t *testing.T) {
	x := newResumeIndex(2, 3)
	exp := time.Unix(1000, 0).Add(time.Minute)
	open := map[string]*resumeEntry{}
	for _, id := range []string{"o1", "o2", "o3", "o4"} {
		open[id] = x.opened(id)
		assert.Empty(t, x.put(id, "a", "c-"+id, exp, false), "%s is open: not dropped, nothing dropped for it", id)
	}
	assert.Equal(t, 4, x.len())
	// A closed record of the team: within the bound of 2, the open ones
	// not counted.
	assert.Empty(t, x.put("gone1", "a", "c-gone1", exp, false))
	// The drain closes o1..o4: their records stay outside the bounds.
	for _, id := range []string{"o1", "o2", "o3", "o4"} {
		x.closed(open[id])
		assert.Empty(t, x.put(id, "a", "c-"+id, exp, true), "%s was drained", id)
	}
	assert.Empty(t, x.put("gone2", "a", "c-gone2", exp, false))
	assert.Equal(t, []resumeDrop{{"gone1", "c-gone1", "team"}}, x.put("gone3", "a", "c-gone3", exp, false),
		"the team's bound counts the records of clients that left on their own")
	// An identity open twice stays unbounded until both ended.
	p := x.opened("p")
	assert.Same(t, p, x.opened("p"), "one entry per identity")
	x.closed(p)
	assert.Empty(t, x.put("p", "a", "c-p", exp, false))
	x.closed(p)
	assert.Equal(t, []resumeDrop{{"gone2", "c-gone2", "team"}}, x.put("p", "a", "c-p", exp, false),
		"p left: bounded again, and the oldest of the team goes")
	// Opened again: out of the bounded lists at once.
	x.opened("p")
	assert.Empty(t, x.put("gone4", "a", "c-gone4", exp, false), "gone3 and gone4 fit: p is open")
}

// TestResumeIndexEntryHandles: a connection's entry (its handle) lives
// while the identity has a connection open here or a record kept, and is
// the same for every connection of the identity; a record forgotten while
// a connection is open leaves the handle valid, the next put keeping it
// again.
func TestResumeIndexEntryHandles(t *testing.T) {
	x := newResumeIndex(2, 3)
	t0 := time.Unix(1000, 0)
	exp := t0.Add(time.Minute)
	a := x.opened("a")
	assert.Equal(t, 0, x.len(), "open, nothing written: no record")
	x.closed(a)
	assert.Empty(t, x.byID, "neither open nor kept: forgotten")

	a = x.opened("a")
	assert.Empty(t, x.putEntry(a, "t", "c1", exp, false))
	x.remove("a") // deleted (the client closed another connection of it)
	assert.Equal(t, 0, x.len())
	assert.Same(t, a, x.byID["a"], "still open: the handle stays the identity's entry")
	assert.Empty(t, x.putEntry(a, "t", "c1", exp, false))
	assert.Equal(t, 1, x.len())
	x.prune(exp)
	assert.Equal(t, 0, x.len(), "expired while open")
	assert.Same(t, a, x.byID["a"])
	x.closed(a)
	assert.Empty(t, x.byID)
}

// TestResumeIndexExpiryMoves: a record written again with a later expiry
// expires then, not at its first (its place in the heap is moved when it
// comes up), and one written with an earlier expiry expires at the
// earlier, whichever order the expiries were set in.
func TestResumeIndexExpiryMoves(t *testing.T) {
	x := newResumeIndex(10, 10)
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	x.put("later", "t", "c", at(10), false)
	x.put("earlier", "t", "c", at(30), false)
	x.put("steady", "t", "c", at(20), false)
	for s := 20; s <= 60; s += 10 {
		x.put("later", "t", "c", at(s), false) // rewritten, expiring later each time
	}
	x.put("earlier", "t", "c", at(15), false)
	kept := func() []string {
		var ids []string
		for id, e := range x.byID {
			if e.kept {
				ids = append(ids, id)
			}
		}
		return ids
	}
	x.prune(at(14))
	assert.ElementsMatch(t, []string{"later", "earlier", "steady"}, kept())
	x.prune(at(15))
	assert.ElementsMatch(t, []string{"later", "steady"}, kept(), "moved earlier: expires at the earlier")
	x.prune(at(20))
	assert.ElementsMatch(t, []string{"later"}, kept())
	x.prune(at(59))
	assert.ElementsMatch(t, []string{"later"}, kept(), "moved later: kept until its last expiry")
	x.prune(at(60))
	assert.Empty(t, kept())
	assert.Empty(t, x.exp)
	assert.Equal(t, 0, x.len())
}
