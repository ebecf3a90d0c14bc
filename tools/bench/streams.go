package main

import (
	"fmt"
	"time"

	"streamgate/catalog"
	"streamgate/upstreamsim"
)

// liveStreams returns n public live streams of network whose reports cover
// the simulator's whole history, so that any timestamp of it has a report.
func liveStreams(sim *upstreamsim.Simulator, network string, n int) ([]string, error) {
	now := time.Now().Unix()
	out := publicStreams(sim, network, n, func(s catalog.Stream, first, last int64) bool {
		return s.Status == "live" && first <= now-86400+600 && last >= now-5
	})
	if len(out) < n {
		return nil, fmt.Errorf("the simulator has %d streams with a full history on %s, %d asked for", len(out), network, n)
	}
	return out, nil
}

// publicStreams returns up to n public streams of network, in the
// simulator's order, for which keep (given the stream and the first and
// last seconds it has a report for) is true.
func publicStreams(sim *upstreamsim.Simulator, network string, n int, keep func(s catalog.Stream, first, last int64) bool) []string {
	hidden := map[string]bool{}
	for _, id := range sim.Hidden(network) {
		hidden[id] = true
	}
	var out []string
	for _, s := range sim.Streams(network) {
		if len(out) == n {
			break
		}
		first, last, ok := sim.Window(network, s.FeedID)
		if ok && !hidden[s.FeedID] && keep(s, first, last) {
			out = append(out, s.FeedID)
		}
	}
	return out
}

// publishingStreams returns n public streams of network that publish now
// (every second), whatever their history or status. When fewer exist and
// orFewer is set, it returns them all, down to a multiple of
// wsFeedsPerClient.
func publishingStreams(sim *upstreamsim.Simulator, network string, n int, orFewer bool) ([]string, error) {
	now := time.Now().Unix()
	out := publicStreams(sim, network, n, func(_ catalog.Stream, _, last int64) bool { return last >= now-5 })
	if orFewer && len(out) < n {
		out = out[:len(out)/wsFeedsPerClient*wsFeedsPerClient]
	}
	if len(out) < n && !orFewer || len(out) == 0 {
		return nil, fmt.Errorf("the simulator has %d public streams publishing on %s, %d asked for", len(out), network, n)
	}
	return out, nil
}

// lagOfStream is the publication delay of a stream, read within a second.
func lagOfStream(sim *upstreamsim.Simulator, network, feed string) int64 {
	for range 5 {
		before := time.Now().Unix()
		_, last, _ := sim.Window(network, feed)
		if now := time.Now().Unix(); now == before {
			return now - last
		}
	}
	return 3
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
