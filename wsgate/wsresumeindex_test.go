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
