package status

import (
	"maps"
	"slices"
)

// Families returns the names of the metric families the sampler keeps:
// every name the page and the headline read.
func Families() []string { return slices.Sorted(maps.Keys(families)) }
