package proxy

import (
	"encoding/json"
	"net/http"
	"time"

	"streamgate/cache"
	"streamgate/don"
	"streamgate/feedid"
	"streamgate/internal/apierror"
)

// The stored record formats: what the gateway checks of an upstream
// report, and the form in which it keeps reports.

// reportDoc is the part of a report record the gateway checks: every field
// it repeats of its signed blob, and the fullReport.
type reportDoc = don.Record

// anySecond is the timestamp asked of a latest report: any second.
const anySecond = -1

// negative is a short-lived entry for "no report yet", kept for ttl
// (negative_ttl).
func negative(now time.Time, resp *upstreamResponse, ttl time.Duration) *cache.Entry {
	return &cache.Entry{Status: resp.status, Body: resp.body, Stored: now, Expires: now.Add(ttl), NoStore: ttl <= 0}
}

// checker checks what enters a network's cache, from the upstream or the
// shared tier: that a report is of the stream asked for (an answer that is
// not is counted as an integrity error), and its DON signatures (gate).
type checker struct {
	network string
	gate    *don.Gate
	metrics *Metrics
}

// checkReport parses a {"report": …} body and refuses one that is not of the
// stream asked for, or not of the second ts asked for (anySecond: latest):
// such an answer is an upstream error, never a cache entry.
// Its report is verified (verify) unless the caller already did: its
// signatures, and that the record's fields are its signed blob's.
// It returns the body in the form every stored report has (see reportBody).
func (c *checker) checkReport(body []byte, endpoint, feed string, ts int64, verify bool) (*reportDoc, []byte, error) {
	rd, record, ok := parseReport(body, feed, ts)
	if !ok {
		c.metrics.integrity(c.network, endpoint)
		return nil, nil, errBadUpstream
	}
	if verify {
		if err := c.verifyDoc(don.EntryUpstream, rd); err != nil {
			return nil, nil, err
		}
	}
	return rd, reportBody(record), nil
}

// verifyDoc checks a report's DON signatures where it enters, and that
// its record's feedID and times are the signed blob's; in mode enforce a
// report that does not verify is an error (502), never an entry.
func (c *checker) verifyDoc(entry string, rd *reportDoc) error {
	if res, ok := c.gate.Check(entry, *rd); !ok {
		return unverified(res.Cause)
	}
	return nil
}

// verifyRaw checks the report records of an answer, each as verifyDoc.
func (c *checker) verifyRaw(entry string, records []json.RawMessage) error {
	if c.gate.Mode() == don.ModeOff {
		return nil
	}
	for _, raw := range records {
		var rd reportDoc
		if err := json.Unmarshal(raw, &rd); err != nil {
			return errBadUpstream
		}
		if err := c.verifyDoc(entry, &rd); err != nil {
			return err
		}
	}
	return nil
}

// unverified is the error answered for a report that did not verify, one
// per cause, so that a client sees why.
func unverified(c don.Cause) *apierror.Error {
	return apierror.New(http.StatusBadGateway, "the upstream's report did not verify against the DON's signatures ("+string(c)+": "+c.Meaning()+"); it is not served")
}

// parseReport parses a {"report": …} body and reports whether it is a
// report of feed at ts (its observationsTimestamp; anySecond: any); it
// returns the record as sent.
func parseReport(body []byte, feed string, ts int64) (*reportDoc, json.RawMessage, bool) {
	var doc struct {
		Report json.RawMessage `json:"report"`
	}
	var rd reportDoc
	if err := json.Unmarshal(body, &doc); err != nil || len(doc.Report) == 0 ||
		json.Unmarshal(doc.Report, &rd) != nil || feedid.Canon(rd.FeedID) != feed ||
		(ts != anySecond && rd.ObservationsTimestamp != ts) {
		return nil, nil, false
	}
	return &rd, doc.Report, true
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
// refusing an answer that holds a stream not asked for or a report not of
// the second ts asked for. Every report of it is verified.
func (c *checker) splitBulk(body []byte, feeds []string, ts int64) (map[string][]byte, error) {
	out, ok := parseBulk(body, feeds, ts)
	if !ok {
		c.metrics.integrity(c.network, "bulk")
		return nil, errBadUpstream
	}
	if err := c.verifyRecords(don.EntryUpstream, out); err != nil {
		return nil, err
	}
	return out, nil
}

// verifyRecords verifies the report records of a split bulk answer.
func (c *checker) verifyRecords(entry string, records map[string][]byte) error {
	if c.gate.Mode() == don.ModeOff {
		return nil
	}
	for _, raw := range records {
		if err := c.verifyRaw(entry, []json.RawMessage{raw}); err != nil {
			return err
		}
	}
	return nil
}

// parseBulk parses a bulk answer into the report record of each stream and
// reports false for an answer that is malformed, holds a stream not asked
// for, or a report not of the second ts (its observationsTimestamp).
func parseBulk(body []byte, feeds []string, ts int64) (map[string][]byte, bool) {
	var doc struct {
		Reports []json.RawMessage `json:"reports"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Reports == nil {
		return nil, false
	}
	asked := make(map[string]struct{}, len(feeds))
	for _, f := range feeds {
		asked[f] = struct{}{}
	}
	out := make(map[string][]byte, len(doc.Reports))
	for _, raw := range doc.Reports {
		var rd reportDoc
		if err := json.Unmarshal(raw, &rd); err != nil {
			return nil, false
		}
		id := feedid.Canon(rd.FeedID)
		if _, ok := asked[id]; !ok || rd.ObservationsTimestamp != ts {
			return nil, false
		}
		out[id] = raw
	}
	return out, true
}

// parsePage parses a page answer and reports whether it is a page of feed
// from start: its reports in ascending order, none before start. stamps
// are the reports' observationsTimestamps.
func parsePage(body []byte, feed string, start int64) (reports []json.RawMessage, stamps []int64, ok bool) {
	var doc struct {
		Reports []json.RawMessage `json:"reports"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.Reports == nil {
		return nil, nil, false
	}
	stamps = make([]int64, len(doc.Reports))
	last := int64(-1)
	for i, raw := range doc.Reports {
		var rd reportDoc
		if err := json.Unmarshal(raw, &rd); err != nil || feedid.Canon(rd.FeedID) != feed ||
			rd.ObservationsTimestamp < start || rd.ObservationsTimestamp <= last {
			return nil, nil, false
		}
		last = rd.ObservationsTimestamp
		stamps[i] = last
	}
	return doc.Reports, stamps, true
}

// reportPayload returns the record of a stored report (see reportBody).
func reportPayload(body []byte) []byte {
	if len(body) < len(reportPrefix)+len(reportSuffix) || string(body[:len(reportPrefix)]) != reportPrefix {
		return nil // never stored by this package
	}
	return body[len(reportPrefix) : len(body)-len(reportSuffix)]
}
