package proxy

import (
	"encoding/json"
	"time"

	"streamgate/cache"
)

// The stored record formats: what the gateway checks of an upstream
// report, and the form in which it keeps reports.

// reportDoc is the part of a report record the gateway checks.
type reportDoc struct {
	FeedID                string `json:"feedID"`
	ValidFromTimestamp    int64  `json:"validFromTimestamp"`
	ObservationsTimestamp int64  `json:"observationsTimestamp"`
	FullReport            string `json:"fullReport"`
}

// negative is a short-lived entry for "no report yet".
func (n *network) negative(now time.Time, resp *upstreamResponse) *cache.Entry {
	ttl := n.policy().negativeTTL
	return &cache.Entry{Status: resp.status, Body: resp.body, Stored: now, Expires: now.Add(ttl), NoStore: ttl <= 0}
}

// checkReport parses a {"report": …} body and refuses one that is not of the
// stream asked for: such an answer is an upstream error, never a cache entry.
// It returns the body in the form every stored report has (see reportBody).
func (n *network) checkReport(body []byte, endpoint, feed string) (*reportDoc, []byte, error) {
	var doc struct {
		Report json.RawMessage `json:"report"`
	}
	var rd reportDoc
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Report) == 0 ||
		json.Unmarshal(doc.Report, &rd) != nil || normalFeedID(rd.FeedID) != feed {
		n.metrics.integrity(n.name, endpoint)
		return nil, nil, errBadUpstream
	}
	return &rd, reportBody(doc.Report), nil
}

// The form of every stored report: {"report":<record>} and a newline, the
// record exactly as the upstream sent it. Bulk answers cut the record out of
// it without parsing again.
const (
	reportPrefix = `{"report":`
	reportSuffix = "}\n"
)

// reportBody wraps a report record checked by the caller.
func reportBody(record []byte) []byte {
	body := make([]byte, 0, len(reportPrefix)+len(record)+len(reportSuffix))
	return append(append(append(body, reportPrefix...), record...), reportSuffix...)
}

// noReportBody answers, from a negative entry, for a stream that had no
// report at a timestamp.
var noReportBody = []byte(`{"error":"no report for this stream at this timestamp yet","message":"no report for this stream at this timestamp yet"}` + "\n")

// splitBulk parses a bulk answer into the report record of each stream,
// refusing an answer that holds a stream not asked for.
func (n *network) splitBulk(body []byte, feeds []string) (map[string][]byte, error) {
	var doc struct {
		Reports []json.RawMessage `json:"reports"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Reports == nil {
		n.metrics.integrity(n.name, "bulk")
		return nil, errBadUpstream
	}
	asked := make(map[string]struct{}, len(feeds))
	for _, f := range feeds {
		asked[f] = struct{}{}
	}
	out := make(map[string][]byte, len(doc.Reports))
	for _, raw := range doc.Reports {
		var rd reportDoc
		if err := json.Unmarshal(raw, &rd); err != nil {
			n.metrics.integrity(n.name, "bulk")
			return nil, errBadUpstream
		}
		id := normalFeedID(rd.FeedID)
		if _, ok := asked[id]; !ok {
			n.metrics.integrity(n.name, "bulk")
			return nil, errBadUpstream
		}
		out[id] = raw
	}
	return out, nil
}

// reportPayload returns the record of a stored report (see reportBody).
func reportPayload(body []byte) []byte {
	if len(body) < len(reportPrefix)+len(reportSuffix) || string(body[:len(reportPrefix)]) != reportPrefix {
		return nil // never stored by this package
	}
	return body[len(reportPrefix) : len(body)-len(reportSuffix)]
}
