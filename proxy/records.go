package proxy

import (
	"errors"
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
	rd, record, err := parseReport(body, feed, ts)
	if err != nil {
		return nil, nil, c.readError(don.EntryUpstream, endpoint, err)
	}
	if verify {
		if err := c.verifyDoc(don.EntryUpstream, rd); err != nil {
			return nil, nil, err
		}
	}
	return rd, reportBody(record), nil
}

// readError is the error of an answer whose reports did not read, or were
// not the ones asked for: one refused as it was read (a report over the
// size bound, a key twice: don.Refused) is counted by cause with the
// verification failures, in every mode, and answered naming the cause;
// any other is an integrity error.
func (c *checker) readError(entry, endpoint string, err error) error {
	if don.Refused(err) {
		return refused(c.gate.Refuse(entry, err))
	}
	if entry == don.EntryUpstream {
		c.metrics.integrity(c.network, endpoint)
	}
	return errBadUpstream
}

// storedError is readError for an entry of the shared tier: a refusal is
// counted, and the entry is not taken (errStoredEntry).
func (c *checker) storedError(err error) error {
	if don.Refused(err) {
		c.gate.Refuse(don.EntryShared, err)
	}
	return errStoredEntry
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

// verifyAll checks the report records of an answer, each as verifyDoc.
func (c *checker) verifyAll(entry string, records []reportDoc) error {
	if c.gate.Mode() == don.ModeOff {
		return nil
	}
	for i := range records {
		if err := c.verifyDoc(entry, &records[i]); err != nil {
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

// refused is the error answered for an answer whose report was refused as
// it was read (don.Refused), one per cause.
func refused(c don.Cause) *apierror.Error {
	return apierror.New(http.StatusBadGateway, "the upstream's report was refused ("+string(c)+": "+c.Meaning()+"); it is not served")
}

// errNotAsked is the error of an answer that read, but is not of the
// stream or the second asked for.
var errNotAsked = errors.New("proxy: not the report asked for")

// parseReport reads a {"report": …} body (don.ReadReport: the one reading
// of a report, the stream's too) and checks that it is a report of feed at
// ts (its observationsTimestamp; anySecond: any); it returns the record
// as sent.
func parseReport(body []byte, feed string, ts int64) (*reportDoc, []byte, error) {
	rd, record, err := don.ReadReport(body)
	if err != nil {
		return nil, nil, err
	}
	if feedid.Canon(rd.FeedID) != feed || (ts != anySecond && rd.ObservationsTimestamp != ts) {
		return nil, nil, errNotAsked
	}
	return &rd, record, nil
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
	out, recs, err := parseBulk(body, feeds, ts)
	if err != nil {
		return nil, c.readError(don.EntryUpstream, "bulk", err)
	}
	if err := c.verifyAll(don.EntryUpstream, recs); err != nil {
		return nil, err
	}
	return out, nil
}

// parseBulk reads a bulk answer (don.ReadReports) into the report record
// of each stream and refuses (errNotAsked) an answer that holds a stream
// not asked for, or a report not of the second ts (its
// observationsTimestamp). It returns the records read too.
func parseBulk(body []byte, feeds []string, ts int64) (map[string][]byte, []reportDoc, error) {
	recs, raws, err := don.ReadReports(body)
	if err != nil {
		return nil, nil, err
	}
	asked := make(map[string]struct{}, len(feeds))
	for _, f := range feeds {
		asked[f] = struct{}{}
	}
	out := make(map[string][]byte, len(recs))
	for i, rd := range recs {
		id := feedid.Canon(rd.FeedID)
		if _, ok := asked[id]; !ok || rd.ObservationsTimestamp != ts {
			return nil, nil, errNotAsked
		}
		out[id] = raws[i]
	}
	return out, recs, nil
}

// parsePage reads a page answer (don.ReadReports) and checks that it is a
// page of feed from start: its reports in ascending order, none before
// start. It returns the records read and each one's bytes.
func parsePage(body []byte, feed string, start int64) (recs []reportDoc, raws [][]byte, err error) {
	recs, raws, err = don.ReadReports(body)
	if err != nil {
		return nil, nil, err
	}
	last := int64(-1)
	for _, rd := range recs {
		if feedid.Canon(rd.FeedID) != feed || rd.ObservationsTimestamp < start || rd.ObservationsTimestamp <= last {
			return nil, nil, errNotAsked
		}
		last = rd.ObservationsTimestamp
	}
	return recs, raws, nil
}

// reportPayload returns the record of a stored report (see reportBody).
func reportPayload(body []byte) []byte {
	if len(body) < len(reportPrefix)+len(reportSuffix) || string(body[:len(reportPrefix)]) != reportPrefix {
		return nil // never stored by this package
	}
	return body[len(reportPrefix) : len(body)-len(reportSuffix)]
}
