package share

import (
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
)

// layout is the union of the wants split into chunks.
type layout struct {
	n      int
	chunks [][]string // sorted, at most FeedsPerConnection each
	over   int        // feeds over FeedsPerConnection in their chunk
	slot   map[string]int
	digest []uint64
}

func tag(n, i int) string { return strconv.Itoa(n) + "/" + strconv.Itoa(i) }

// chunkOf returns the chunk index of feed among n.
func chunkOf(feed string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(feed))
	return int(h.Sum64() % uint64(n))
}

func digest(feeds []string) uint64 {
	h := fnv.New64a()
	for _, f := range feeds {
		h.Write([]byte(f))
		h.Write([]byte{','})
	}
	return h.Sum64()
}

// newLayout splits union (sorted) into n chunks.
func newLayout(union []string, maxChunks, perConn int) layout {
	l := layout{slot: map[string]int{}}
	if len(union) == 0 || maxChunks < 1 {
		return l
	}
	l.n = min(maxChunks, (len(union)+perConn-1)/perConn)
	l.chunks = make([][]string, l.n)
	var spill []string
	for _, f := range union {
		i := chunkOf(f, l.n)
		if len(l.chunks[i]) >= perConn {
			spill = append(spill, f)
			continue
		}
		l.chunks[i] = append(l.chunks[i], f)
		l.slot[f] = i
	}
	// A chunk's hash share over FeedsPerConnection goes to the next
	// chunks with room, in order: the same union, the same layout.
	for _, f := range spill {
		i := chunkOf(f, l.n)
		placed := false
		for k := 1; k < l.n && !placed; k++ {
			j := (i + k) % l.n
			if len(l.chunks[j]) < perConn {
				l.chunks[j] = append(l.chunks[j], f)
				l.slot[f] = j
				placed = true
			}
		}
		if !placed {
			l.over++
		}
	}
	for _, c := range l.chunks {
		slices.Sort(c)
		l.digest = append(l.digest, digest(c))
	}
	return l
}

func splitTag(t string) (i, n int) {
	a, b, _ := strings.Cut(t, "/")
	n, _ = strconv.Atoi(a)
	i, _ = strconv.Atoi(b)
	return i, n
}
