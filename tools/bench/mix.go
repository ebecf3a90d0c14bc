package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// mix is a weighted choice of endpoints.
type mix struct {
	names   []string
	weights []int
	total   int
}

var mixEndpoints = []string{"latest", "reports", "bulk", "page", "discovery", "feeds"}

func parseMix(s string) (mix, error) {
	var m mix
	for _, part := range splitList(s) {
		name, w, ok := strings.Cut(part, "=")
		n, err := strconv.Atoi(w)
		known := false
		for _, e := range mixEndpoints {
			known = known || e == name
		}
		if !ok || err != nil || n < 0 || !known {
			return mix{}, fmt.Errorf("-mix: %q is not endpoint=weight with endpoint one of %s", part, strings.Join(mixEndpoints, ", "))
		}
		if n > 0 {
			m.names, m.weights = append(m.names, name), append(m.weights, n)
			m.total += n
		}
	}
	if m.total == 0 {
		return mix{}, errors.New("-mix: no endpoint with a positive weight")
	}
	return m, nil
}

// pick chooses an endpoint for a number r in [0, total).
func (m mix) pick(r int) string {
	for i, w := range m.weights {
		if r < w {
			return m.names[i]
		}
		r -= w
	}
	return m.names[len(m.names)-1]
}

func (m mix) String() string {
	parts := make([]string, len(m.names))
	for i := range m.names {
		parts[i] = m.names[i] + "=" + strconv.Itoa(m.weights[i])
	}
	return strings.Join(parts, ",")
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
