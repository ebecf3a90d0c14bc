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
	assert.Empty(t, x.put("a1", "a", exp))
	assert.Empty(t, x.put("a2", "a", exp))
	assert.Empty(t, x.put("a1", "a", exp)) // written again: a2 is the oldest now
	assert.Equal(t, []resumeDrop{{"a2", "team"}}, x.put("a3", "a", exp))
	assert.Empty(t, x.put("b1", "b", exp))
	assert.Equal(t, []resumeDrop{{"a1", "total"}}, x.put("b2", "b", t0.Add(time.Second)))
	assert.Equal(t, 3, x.len())
	x.remove("a3")
	assert.Equal(t, 2, x.len())
	x.prune(t0.Add(2 * time.Second))
	assert.Equal(t, 1, x.len(), "b2 expired")
	assert.Empty(t, x.put("b3", "b", exp))
	assert.Equal(t, 2, x.len())
}
