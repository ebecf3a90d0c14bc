package proxy

import (
	"testing"
	"time"
)

// TestRefresherPickIsFair: one team polling many streams hard cannot starve
// another team's stream: picks go round robin over the teams, and within a
// team a stream someone waits on goes first, then the most asked-for.
func TestRefresherPickIsFair(t *testing.T) {
	rf := &refresher{refreshDeps: refreshDeps{maxBulk: 100}, pending: map[string]*refreshItem{}}
	add := func(feed, team string, asks int, waited bool) {
		rf.pending[feed] = &refreshItem{feed: feed, enqueued: time.Now(), asks: asks, waited: waited,
			teams: map[string]int{team: asks + 1}, done: make(chan struct{})}
	}
	for i := range 10 {
		add("busy-"+string(rune('a'+i)), "busy", 100+i, false)
	}
	add("quiet-1", "quiet", 1, false)
	add("quiet-2", "quiet", 0, true) // a client waits on it: first of its team
	var order []string
	for range 4 {
		items := rf.pick(false)
		if len(items) != 1 {
			t.Fatalf("a single pick took %d items", len(items))
		}
		order = append(order, items[0].feed)
	}
	want := []string{"busy-j", "quiet-2", "busy-i", "quiet-1"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("picks %v, want %v", order, want)
		}
	}
	// The bulk worker takes the rest at once, and never an item in flight.
	rest := rf.pick(true)
	if len(rest) != 8 {
		t.Fatalf("bulk took %d items, want the 8 not in flight", len(rest))
	}
	if again := rf.pick(true); len(again) != 0 {
		t.Fatalf("items in flight picked again: %d", len(again))
	}
	// A stream a bulk answer lacked is left to single calls for a while.
	rf.requeue(rest[:2], true)
	if got := rf.pick(true); len(got) != 0 {
		t.Fatalf("bulk took %d items it just lacked", len(got))
	}
	if got := rf.pick(false); len(got) != 1 {
		t.Fatalf("the single worker took %d", len(got))
	}
}
