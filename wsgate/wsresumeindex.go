package wsgate

import (
	"container/heap"
	"container/list"
	"time"
)

// resumeIndex bounds the resume records a replica writes: at most perTeam
// for one team and total for all (realtime.resume_records_per_team,
// realtime.resume_records) of the clients that left this replica on their
// own (a lost connection, a ping timeout: what a client can repeat with
// identities of its choice). A record written beyond a bound drops the
// oldest written of the team, or of all; such a client starts live. The
// bounds are each replica's: with the shared limits, a team's records on
// N replicas are at most N × perTeam, besides the two kinds the bounds
// leave alone:
//
//   - the record of an identity with a connection open here: the client
//     is streaming, its record is rewritten with every new watermark, and
//     the team's connection limit (realtime.team_connections) bounds
//     them. Dropping it would only make the client start live if it
//     reconnected before the next write.
//   - the record of a connection this replica's shutdown closed (its
//     drain, or its hub closing): the gateway moved that client, to
//     resume elsewhere; the records a shutdown leaves are at most the
//     connections that were open.
//
// Each entry remembers the connection that wrote it last (resumeDrop.conn),
// so that a drop deletes the record in Redis only while it is still this
// replica's: a client that has since connected to another replica has its
// record rewritten there, and that one is not this index's to drop.
type resumeIndex struct {
	perTeam, total int

	all   *list.List // of *resumeEntry, the bounded ones, the least recently written first
	teams map[string]*list.List
	byID  map[string]*resumeEntry
	open  map[string]int // identities with connections open here: how many
	exp   resumeExpiries // when each record of byID expires
}

type resumeEntry struct {
	id, team, conn string
	inAll, inTeam  *list.Element // nil: not bounded (open here, or drained)
}

// resumeDrop is a record dropped to stay within a bound.
type resumeDrop struct {
	id     string
	conn   string // the connection that wrote the record dropped
	reason string // "team" or "total"
}

func newResumeIndex(perTeam, total int) *resumeIndex {
	return &resumeIndex{perTeam: max(perTeam, 1), total: max(total, 1), all: list.New(),
		teams: map[string]*list.List{}, byID: map[string]*resumeEntry{}, open: map[string]int{}}
}

// opened records that a connection of identity id is open here: its
// record is not bounded while one is.
func (x *resumeIndex) opened(id string) {
	x.open[id]++
	if e := x.byID[id]; e != nil {
		x.unlink(e)
	}
}

// closed records that a connection of identity id ended here; its next
// put is bounded again unless another is still open or it was drained.
func (x *resumeIndex) closed(id string) {
	if x.open[id]--; x.open[id] <= 0 {
		delete(x.open, id)
	}
}

// put records that id, team's, was written by connection conn and expires
// at exp, and returns the records dropped for it (never id itself).
// drained: the connection that wrote it was closed by this replica's
// shutdown, and the record is not bounded.
func (x *resumeIndex) put(id, team, conn string, exp time.Time, drained bool) []resumeDrop {
	e := x.byID[id]
	if e != nil && e.team != team {
		x.remove(id)
		e = nil
	}
	if e == nil {
		e = &resumeEntry{id: id, team: team}
		x.byID[id] = e
	}
	e.conn = conn
	x.exp.set(id, exp)
	if drained || x.open[id] > 0 {
		x.unlink(e)
		return nil
	}
	tl := x.teams[team]
	if tl == nil {
		tl = list.New()
		x.teams[team] = tl
	}
	if e.inAll != nil {
		x.all.MoveToBack(e.inAll)
		tl.MoveToBack(e.inTeam)
		return nil
	}
	e.inAll, e.inTeam = x.all.PushBack(e), tl.PushBack(e)
	var drops []resumeDrop
	for tl.Len() > x.perTeam {
		old := tl.Front().Value.(*resumeEntry)
		x.remove(old.id)
		drops = append(drops, resumeDrop{old.id, old.conn, "team"})
	}
	for x.all.Len() > x.total {
		old := x.all.Front().Value.(*resumeEntry)
		x.remove(old.id)
		drops = append(drops, resumeDrop{old.id, old.conn, "total"})
	}
	return drops
}

// unlink takes e out of the bounded lists.
func (x *resumeIndex) unlink(e *resumeEntry) {
	if e.inAll == nil {
		return
	}
	x.all.Remove(e.inAll)
	tl := x.teams[e.team]
	tl.Remove(e.inTeam)
	if tl.Len() == 0 {
		delete(x.teams, e.team)
	}
	e.inAll, e.inTeam = nil, nil
}

// remove forgets id's record (not its open connections).
func (x *resumeIndex) remove(id string) {
	e := x.byID[id]
	if e == nil {
		return
	}
	delete(x.byID, id)
	x.exp.remove(id)
	x.unlink(e)
}

// prune forgets the records expired at now (their Redis keys expired):
// those due, not a walk of every record.
func (x *resumeIndex) prune(now time.Time) {
	x.exp.due(now, x.remove)
}

// len returns the records kept.
func (x *resumeIndex) len() int { return len(x.byID) }

// resumeExpiries orders record IDs by when they expire, so that the
// records due are found without a walk of every record kept: set, remove
// and each record due in O(log n). The zero value is empty.
type resumeExpiries struct {
	h  expiryHeap
	at map[string]*expiry
}

type expiry struct {
	id string
	t  time.Time
	i  int // index in the heap
}

// set makes id expire at t.
func (e *resumeExpiries) set(id string, t time.Time) {
	if x := e.at[id]; x != nil {
		x.t = t
		heap.Fix(&e.h, x.i)
		return
	}
	if e.at == nil {
		e.at = map[string]*expiry{}
	}
	x := &expiry{id: id, t: t}
	e.at[id] = x
	heap.Push(&e.h, x)
}

// remove forgets id's expiry, if any.
func (e *resumeExpiries) remove(id string) {
	if x := e.at[id]; x != nil {
		delete(e.at, id)
		heap.Remove(&e.h, x.i)
	}
}

// due forgets each id expired at now and hands it to fn, soonest first.
func (e *resumeExpiries) due(now time.Time, fn func(id string)) {
	for len(e.h) > 0 && !now.Before(e.h[0].t) {
		x := heap.Pop(&e.h).(*expiry)
		delete(e.at, x.id)
		fn(x.id)
	}
}

// expiryHeap is a min-heap of expiries by time (container/heap).
type expiryHeap []*expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].t.Before(h[j].t) }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*expiry)
	e.i = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return e
}
