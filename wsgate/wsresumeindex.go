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
//
// An identity's entry is its handle: a connection gets it when it is
// tracked (opened) and keeps it until it ends (closed), so that the
// flush, which rewrites the records of the connections written to
// several times a second, finds the entry without hashing the identity
// (a client's is about 700 bytes), and a record's expiry moving later,
// which every write of an open connection does, costs no reordering
// (resumeExpiryHeap). An entry lives while its identity has a record
// kept or a connection open here.
type resumeIndex struct {
	perTeam, total int

	all   *list.List // of *resumeEntry, the bounded ones, the least recently written first
	teams map[string]*list.List
	byID  map[string]*resumeEntry // the identities with a record kept or a connection open here
	kept  int                     // the entries with a record kept
	exp   resumeExpiryHeap        // the entries with a record kept, by when they expire
}

// resumeEntry is an identity's entry: its record, if one is kept, and its
// connections open here.
type resumeEntry struct {
	id, team, conn string
	// key is the identity's Redis key (resumeKey), hashed once.
	key string
	// open counts the identity's connections open here: its record is not
	// bounded while one is.
	open int
	// kept: a record of the identity is kept (written, and neither
	// expired, dropped nor deleted since).
	kept bool
	// exp is when the record expires; due is its place in the heap, never
	// after exp (see resumeExpiryHeap), and i its index there (-1: none).
	exp, due time.Time
	i        int
	// rec is the record, in a store without Redis.
	rec           resumeRecord
	inAll, inTeam *list.Element // nil: not bounded (open here, or drained)
}

// resumeDrop is a record dropped to stay within a bound.
type resumeDrop struct {
	id     string
	conn   string // the connection that wrote the record dropped
	reason string // "team" or "total"
}

func newResumeIndex(perTeam, total int) *resumeIndex {
	return &resumeIndex{perTeam: max(perTeam, 1), total: max(total, 1), all: list.New(),
		teams: map[string]*list.List{}, byID: map[string]*resumeEntry{}}
}

// entry returns id's entry, made if it has none.
func (x *resumeIndex) entry(id string) *resumeEntry {
	e := x.byID[id]
	if e == nil {
		e = &resumeEntry{id: id, i: -1}
		x.byID[id] = e
	}
	return e
}

// opened records that a connection of identity id is open here, and
// returns its entry, valid until the connection's closed: its record is
// not bounded while one is.
func (x *resumeIndex) opened(id string) *resumeEntry {
	e := x.entry(id)
	e.open++
	x.unlink(e)
	return e
}

// closed records that a connection of e's identity ended here; its next
// put is bounded again unless another is still open or it was drained.
func (x *resumeIndex) closed(e *resumeEntry) {
	if e.open--; e.open <= 0 {
		e.open = 0
		x.release(e)
	}
}

// release forgets e once it holds nothing: no record, no connection.
func (x *resumeIndex) release(e *resumeEntry) {
	if !e.kept && e.open == 0 && x.byID[e.id] == e {
		delete(x.byID, e.id)
	}
}

// put records that id, team's, was written by connection conn and expires
// at exp, and returns the records dropped for it (never id itself).
// drained: the connection that wrote it was closed by this replica's
// shutdown, and the record is not bounded.
func (x *resumeIndex) put(id, team, conn string, exp time.Time, drained bool) []resumeDrop {
	return x.putEntry(x.entry(id), team, conn, exp, drained)
}

// putEntry is put of e's identity: e is the entry of a connection open
// (opened), or one put just took.
func (x *resumeIndex) putEntry(e *resumeEntry, team, conn string, exp time.Time, drained bool) []resumeDrop {
	if e.team != team {
		x.unlink(e) // bounded again under its new team, as the newest
		e.team = team
	}
	e.conn = conn
	if !e.kept {
		e.kept = true
		x.kept++
	}
	x.exp.set(e, exp)
	if drained || e.open > 0 {
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
		drops = append(drops, resumeDrop{old.id, old.conn, "team"})
		x.forget(old)
	}
	for x.all.Len() > x.total {
		old := x.all.Front().Value.(*resumeEntry)
		drops = append(drops, resumeDrop{old.id, old.conn, "total"})
		x.forget(old)
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
	if e := x.byID[id]; e != nil {
		x.forget(e)
	}
}

// forget forgets e's record (not its open connections).
func (x *resumeIndex) forget(e *resumeEntry) {
	if e.kept {
		e.kept = false
		x.kept--
	}
	x.exp.remove(e)
	x.unlink(e)
	e.rec = resumeRecord{}
	x.release(e)
}

// prune forgets the records expired at now (their Redis keys expired):
// those due, not a walk of every record.
func (x *resumeIndex) prune(now time.Time) {
	x.exp.due(now, x.forget)
}

// len returns the records kept.
func (x *resumeIndex) len() int { return x.kept }

// record returns id's record kept in memory (a store without Redis),
// with its marks of its own: the entry's timestamps are rewritten in
// place by the next record stored.
func (x *resumeIndex) record(id string) (resumeRecord, bool) {
	e := x.byID[id]
	if e == nil || !e.kept {
		return resumeRecord{}, false
	}
	rec := e.rec.withMarks()
	rec.streams, rec.ts = nil, nil
	return rec, true
}

// resumeExpiryHeap orders the entries with a record kept by when they
// expire, so that the records due are found without a walk of every
// record kept. An entry's place (due) may be earlier than its expiry
// (exp): a record rewritten expires later, every write of an open
// connection, and that moves nothing; the entry is put back in its place
// when it comes up (due), once a window at most rather than at every
// write. An expiry moved earlier moves the entry at once. The zero value
// is empty.
type resumeExpiryHeap []*resumeEntry

// set makes e expire at t.
func (h *resumeExpiryHeap) set(e *resumeEntry, t time.Time) {
	e.exp = t
	switch {
	case e.i < 0:
		e.due = t
		heap.Push(h, e)
	case t.Before(e.due):
		e.due = t
		heap.Fix(h, e.i)
	}
}

// remove takes e out of the heap, if it is in.
func (h *resumeExpiryHeap) remove(e *resumeEntry) {
	if e.i >= 0 {
		heap.Remove(h, e.i)
	}
}

// due hands fn each entry expired at now, soonest first, out of the heap
// already; an entry come up whose record expires later goes back in its
// place.
func (h *resumeExpiryHeap) due(now time.Time, fn func(e *resumeEntry)) {
	for len(*h) > 0 && !now.Before((*h)[0].due) {
		e := (*h)[0]
		if now.Before(e.exp) {
			e.due = e.exp
			heap.Fix(h, 0)
			continue
		}
		heap.Pop(h)
		fn(e)
	}
}

func (h resumeExpiryHeap) Len() int           { return len(h) }
func (h resumeExpiryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h resumeExpiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *resumeExpiryHeap) Push(x any) {
	e := x.(*resumeEntry)
	e.i = len(*h)
	*h = append(*h, e)
}
func (h *resumeExpiryHeap) Pop() any {
	old := *h
	n := len(old)
	e := old[n-1]
	old[n-1] = nil
	e.i = -1
	*h = old[:n-1]
	return e
}
