package realtime

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

func set(ids ...string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// TestPlanOwn: the plan of a hub's own connections as a pure function of
// what they carry and what is wanted.
func TestPlanOwn(t *testing.T) {
	tests := []struct {
		name      string
		current   [][]string
		wanted    map[string]bool
		perConn   int
		maxChunks int
		next      [][]string
		over      int
	}{
		{"nothing", nil, set(), 2, 2, [][]string{}, 0},
		{"new chunks in sorted order, the rest over the budget", nil, set("e", "a", "d", "c", "b"), 2, 2,
			[][]string{{"a", "b"}, {"c", "d"}}, 1},
		{"a chunk keeps its feeds still wanted and fills its room", [][]string{{"a", "b", "x"}}, set("a", "b", "c"), 3, 1,
			[][]string{{"a", "b", "c"}}, 0},
		{"a feed stays in its chunk: no switch for it", [][]string{{"c"}, {"a"}}, set("a", "b", "c"), 2, 2,
			[][]string{{"b", "c"}, {"a"}}, 0},
		{"a chunk emptied takes the new feeds", [][]string{{"x"}}, set("a"), 2, 1,
			[][]string{{"a"}}, 0},
		{"a chunk nobody wants any more is empty (closed)", [][]string{{"a"}, {"x"}}, set("a"), 2, 2,
			[][]string{{"a"}, nil}, 0},
		{"no budget", nil, set("a", "b"), 2, 0, [][]string{}, 2},
		{"a chunk over perConn keeps its feeds; the others go elsewhere", [][]string{{"a", "b", "c"}}, set("a", "b", "c", "d"), 2, 2,
			[][]string{{"a", "b", "c"}, {"d"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before [][]string
			for _, c := range tt.current {
				before = append(before, slices.Clone(c))
			}
			next, over := planOwn(tt.current, tt.wanted, tt.perConn, tt.maxChunks)
			assert.Equal(t, tt.next, next)
			assert.Equal(t, tt.over, over)
			assert.Equal(t, before, tt.current, "the inputs are not changed")
			// Every wanted feed is carried once, or counted over.
			seen := map[string]int{}
			for _, c := range next {
				for _, id := range c {
					seen[id]++
				}
			}
			for id := range seen {
				assert.True(t, tt.wanted[id], "%s is not wanted", id)
				assert.Equal(t, 1, seen[id], id)
			}
			assert.Equal(t, len(tt.wanted), len(seen)+over)
		})
	}
}
