package proxy

import (
	"bytes"
	"net/http"
	"time"
)

// UsageRecorder is the usage ledger as the gateway feeds it
// (usage.Ledger): each request once it is answered, and each upstream call
// made for a request. Its methods must not block: they add to a tally.
type UsageRecorder interface {
	// Request records an answered request of team's ("" for none) on
	// network: its endpoint (the route's name), its status, the reports
	// its answer delivered and the bytes of its body.
	// at is the request's one reading of the network's clock (zero when
	// it was not read: the recorder reads its own).
	Request(at time.Time, network, team, endpoint string, status, reports int, bytes int64)
	// UpstreamCall records one upstream call made for a request of team's.
	UpstreamCall(network, team string)
}

// recordUsage gives the ledger the request st describes, as observe ends
// it, unless it was recorded at its upgrade.
func recordUsage(u UsageRecorder, st *reqState) {
	if u != nil && !st.usageDone {
		u.Request(st.now, st.network, st.team, st.endpoint, st.status, st.reports, int64(st.sw.bytes))
	}
}

// upgraded records a request whose connection is taken over (a WebSocket
// upgrade) as it is: its handler returns only when the stream ends, maybe
// after the drain has flushed the ledger for the last time, and the
// request is counted on the day it was made. Its frames are counted as
// they are written (wsgate.FrameCounter).
func (st *reqState) upgraded() {
	if st != nil && st.usage != nil && !st.usageDone {
		st.usageDone = true
		st.usage.Request(st.now, st.network, st.team, st.endpoint, http.StatusSwitchingProtocols, 0, 0)
	}
}

// reportsIn returns how many reports an answer of kind delivers with e:
// one for a report or latest answered 200, each report of a page, none
// for a catalog or a negative answer.
func reportsIn(kind string, status int, body []byte) int {
	if status != 200 {
		return 0
	}
	switch kind {
	case "report", "latest":
		return 1
	case "page":
		// Each report of a page has one fullReport member, and no other
		// member's value (hex, numbers, a stream ID) can hold the name.
		return bytes.Count(body, fullReportMember)
	}
	return 0
}

var fullReportMember = []byte(`"fullReport"`)

// delivered returns how many streams of a bulk answer have a report.
func delivered(found [][]byte) int {
	n := 0
	for _, rep := range found {
		if rep != nil {
			n++
		}
	}
	return n
}
