package wsgate

import (
	"container/list"
	"time"
)

// resumeIndex bounds the resume records a replica writes: at most perTeam
// for one team and total for all (realtime.resume_records_per_team,
// realtime.resume_records). A record written beyond a bound drops the
// oldest written of the team, or of all; such a client starts live. The
// bounds are each replica's: with the shared limits, a team's records on
// N replicas are at most N × perTeam.
type resumeIndex struct {
	perTeam, total int

	all   *list.List // of *resumeEntry, the least recently written first
	teams map[string]*list.List
	byID  map[string]*resumeEntry
}

type resumeEntry struct {
	id, team      string
	expires       time.Time
	inAll, inTeam *list.Element
}

// resumeDrop is a record dropped to stay within a bound.
type resumeDrop struct {
	id     string
	reason string // "team" or "total"
}

func newResumeIndex(perTeam, total int) *resumeIndex {
	return &resumeIndex{perTeam: max(perTeam, 1), total: max(total, 1), all: list.New(),
		teams: map[string]*list.List{}, byID: map[string]*resumeEntry{}}
}

// put records that id, team's, was written and expires at exp, and
// returns the records dropped for it (never id itself).
func (x *resumeIndex) put(id, team string, exp time.Time) []resumeDrop {
	if e := x.byID[id]; e != nil && e.team == team {
		e.expires = exp
		x.all.MoveToBack(e.inAll)
		x.teams[team].MoveToBack(e.inTeam)
		return nil
	} else if e != nil {
		x.remove(id)
	}
	tl := x.teams[team]
	if tl == nil {
		tl = list.New()
		x.teams[team] = tl
	}
	e := &resumeEntry{id: id, team: team, expires: exp}
	e.inAll, e.inTeam = x.all.PushBack(e), tl.PushBack(e)
	x.byID[id] = e
	var drops []resumeDrop
	for tl.Len() > x.perTeam {
		old := tl.Front().Value.(*resumeEntry)
		x.remove(old.id)
		drops = append(drops, resumeDrop{old.id, "team"})
	}
	for x.all.Len() > x.total {
		old := x.all.Front().Value.(*resumeEntry)
		x.remove(old.id)
		drops = append(drops, resumeDrop{old.id, "total"})
	}
	return drops
}

// remove forgets id.
func (x *resumeIndex) remove(id string) {
	e := x.byID[id]
	if e == nil {
		return
	}
	delete(x.byID, id)
	x.all.Remove(e.inAll)
	tl := x.teams[e.team]
	tl.Remove(e.inTeam)
	if tl.Len() == 0 {
		delete(x.teams, e.team)
	}
}

// prune forgets the records expired at now (their Redis keys expired).
func (x *resumeIndex) prune(now time.Time) {
	for el := x.all.Front(); el != nil; {
		next := el.Next()
		if e := el.Value.(*resumeEntry); !now.Before(e.expires) {
			x.remove(e.id)
		}
		el = next
	}
}

// len returns the records kept.
func (x *resumeIndex) len() int { return len(x.byID) }
