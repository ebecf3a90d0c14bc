package proxy

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"streamgate/auth"
	"streamgate/cache"
	"streamgate/cache/shared"
	"streamgate/don"
)

// bulkParallel bounds the upstream bulk calls one request makes at once.
const bulkParallel = 4

// bulkSource answers GET /api/v1/reports/bulk by fan-out: every stream is
// looked up in the per-stream report cache (shared with /reports); only the
// missing ones go upstream, in as few bulk calls as max_bulk allows; the
// answers fill the per-stream entries. The response is 206 when any stream
// has no report at the timestamp.
type bulkSource struct {
	sourceDeps
	shared  *shared.Tier // for the chunk's reports stored by other replicas; nil: off
	maxBulk int
}

func (s *bulkSource) serve(w http.ResponseWriter, r *http.Request, p *auth.Principal) {
	rq, ok := s.reads.read(w, r, p, "bulk", shapeBulk)
	if !ok {
		return
	}
	ctx, feeds, ts, cred := r.Context(), rq.feeds, rq.ts, rq.cred

	found := make([][]byte, len(feeds)) // the report record of each stream, nil when none
	var missing []string
	hits, negative := 0, 0
	for i, f := range feeds {
		e, state := s.store.Get(cache.ReportKey(s.network, cred.scope, string(f), ts))
		switch {
		case state != cache.Fresh:
			missing = append(missing, string(f))
		case e.Status == http.StatusOK:
			found[i] = reportPayload(e.Body)
			hits++
		default: // a negative entry: no report yet, known without asking
			negative++
		}
	}
	if len(missing) > 0 {
		// What memory did not hold, the archive may: one read.
		if held := s.arch.reports(ctx, cred, missing, ts); len(held) > 0 {
			now, rest := s.now(), missing[:0]
			for i, f := range feeds {
				if rep, ok := held[string(f)]; ok && found[i] == nil {
					found[i] = rep
					hits++
					s.store.Set(cache.ReportKey(s.network, cred.scope, string(f), ts),
						&cache.Entry{Status: http.StatusOK, Body: reportBody(rep), Stored: now})
				}
			}
			for _, f := range missing {
				if _, ok := held[f]; !ok {
					rest = append(rest, f)
				}
			}
			missing = rest
		}
	}
	s.metrics.cacheResultN(s.network, "bulk", "hit", hits)
	s.metrics.cacheResultN(s.network, "bulk", "negative", negative)
	hits += negative

	outcome := "HIT"
	if len(missing) > 0 {
		fetched, label, err := s.fetch(ctx, cred, missing, ts, false)
		if err != nil {
			stateOf(ctx).cache = "MISS"
			writeError(w, err)
			return
		}
		outcome = label
		for i, f := range feeds {
			if found[i] == nil {
				found[i] = fetched[string(f)]
			}
		}
	}
	if hits > 0 {
		s.metrics.saved(s.network, "bulk")
	}

	decoded := wantsDecoded(r)
	if decoded {
		for i, rep := range found {
			if rep != nil {
				if d, ok := s.ans.decodedRecord(cache.ReportKey(s.network, cred.scope, string(feeds[i]), ts), rep); ok {
					found[i] = d
				}
			}
		}
	}
	status := http.StatusOK
	size := 16
	for _, rep := range found {
		if rep == nil {
			status = http.StatusPartialContent
		}
		size += len(rep) + 1
	}
	buf := bulkBuffer(size)
	out := append((*buf)[:0], `{"reports":[`...)
	first := true
	for _, rep := range found {
		if rep == nil {
			continue
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, rep...)
	}
	out = append(out, "]}\n"...)

	st := stateOf(ctx)
	st.cache = outcome
	st.reports = delivered(found)
	h := w.Header()
	st.room.setHeader(h, "X-Cache", outcome)
	b := strconv.AppendInt(st.room.text.room(), int64(hits), 10)
	b = append(b, '/')
	st.room.setHeader(h, "X-Cache-Hits", st.room.text.take(strconv.AppendInt(b, int64(len(feeds)), 10)))
	st.room.setHeader(h, "Cache-Control", "no-store")
	if decoded {
		st.room.setHeader(h, "Content-Type", don.DecodedMediaType)
		st.room.setHeader(h, "Vary", "Accept")
	} else {
		st.room.setHeader(h, "Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(out)
	*buf = out
	bulkBuffers.Put(buf)
}

// bulkBuffers keeps the buffers bulk answers are assembled in: the
// ResponseWriter has the bytes once Write returns. Buffers larger than
// bulkBufferMax are not kept.
var bulkBuffers sync.Pool

const bulkBufferMax = 1 << 20

// bulkBuffer returns a buffer of at least size bytes of capacity; put it
// back in bulkBuffers after use.
func bulkBuffer(size int) *[]byte {
	if size <= bulkBufferMax {
		if b, ok := bulkBuffers.Get().(*[]byte); ok {
			if cap(*b) >= size {
				return b
			}
			// Too small: let it go, and make one that fits.
		}
	}
	b := make([]byte, 0, size)
	return &b
}

// fetch asks the upstream for the reports of feeds at ts, in chunks of
// max_bulk made concurrently, and returns the report record of each stream
// that had one. Identical chunks asked by concurrent requests share one call.
// fill marks a stream's backfill: its upstream calls take their token of
// the budget's fill share first (upstream.waitFillShare).
func (s *bulkSource) fetch(ctx context.Context, cred *credential, feeds []string, ts int64, fill bool) (map[string][]byte, string, error) {
	chunk := max(s.maxBulk, 1)
	type result struct {
		reports map[string][]byte
		outcome cache.Outcome
		err     error
	}
	nChunks := (len(feeds) + chunk - 1) / chunk
	results := make([]result, nChunks)
	sem := make(chan struct{}, bulkParallel)
	calls := stateOf(ctx).counter() // made here: the chunks run at once
	var wg sync.WaitGroup
	for c := range nChunks {
		part := feeds[c*chunk : min((c+1)*chunk, len(feeds))]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			reports, outcome, err := s.fetchChunk(ctx, calls, cred, part, ts, fill)
			results[c] = result{reports, outcome, err}
		}()
	}
	wg.Wait()
	all := make(map[string][]byte, len(feeds))
	label := "COALESCED"
	for _, res := range results {
		if res.err != nil {
			return nil, "MISS", res.err
		}
		if res.outcome != cache.Coalesced && res.outcome != cache.Hit {
			label = "MISS"
		}
		for k, v := range res.reports {
			all[k] = v
		}
	}
	return all, label, nil
}

func (s *bulkSource) fetchChunk(ctx context.Context, calls *callCount, cred *credential, feeds []string, ts int64, fill bool) (map[string][]byte, cache.Outcome, error) {
	tsText := strconv.FormatInt(ts, 10)
	ids := strings.Join(feeds, ",")
	target := "/api/v1/reports/bulk?feedIDs=" + ids + "&timestamp=" + tsText
	// The flight key names the exact chunk: identical chunks asked at once
	// become one upstream call. The entry itself is never stored.
	flight := cache.BulkKey(s.network, cred.scope, ts, feeds)
	// One replica calls for the chunk; the others wait for its answer,
	// kept in the shared tier for negative_ttl, never in memory (the
	// reports are, each under its key).
	e, outcome, err := s.store.LoadFrom(fillContext(ctx), flight, cache.Source{Check: s.records.storedBulk(feeds, ts), NotInMemory: true,
		Fill: func(ctx context.Context) (*cache.Entry, error) {
			// Every report of the chunk stored by another replica: no call.
			if e := s.sharedChunk(ctx, cred, feeds, ts); e != nil {
				return e, nil
			}
			if fill {
				if err := s.up.waitFillShare(ctx, cred); err != nil {
					return nil, err
				}
			}
			return s.fillChunk(ctx, calls, target, cred, feeds, ts)
		}})
	if err != nil {
		return nil, outcome, err
	}
	reports, ok := bulkKind.Value(e)
	if !ok {
		return nil, outcome, errBadUpstream // every bulk fill sets its reports
	}
	return reports, outcome, nil
}

// bulkKind is the kind of a bulk chunk's flight: its value is the chunk's
// reports split by stream, handed to every waiter.
var bulkKind cache.Kind[map[string][]byte]

// fillChunk calls the upstream for one bulk chunk and stores each report
// (in memory, and in the shared tier for the other replicas). The entry
// carries the split reports for every waiter; it lives for negative_ttl, in
// the shared tier only.
func (s *bulkSource) fillChunk(ctx context.Context, calls *callCount, target string, cred *credential, feeds []string, ts int64) (*cache.Entry, error) {
	resp, err := s.up.fetch(ctx, calls, "bulk", target, cred, http.StatusOK, http.StatusPartialContent)
	if err != nil {
		return nil, err
	}
	reports, err := s.records.splitBulk(resp.body, feeds, ts)
	if err != nil {
		return nil, err
	}
	now := s.now()
	negTTL := s.pol.Load().negativeTTL
	for _, rep := range reports {
		s.arch.keepRaw(cred, rep)
	}
	for _, f := range feeds {
		key := cache.ReportKey(s.network, cred.scope, f, ts)
		if rep, ok := reports[f]; ok {
			s.store.Set(key, &cache.Entry{Status: http.StatusOK, Body: reportBody(rep), Stored: now})
		} else if negTTL > 0 {
			s.store.Set(key, &cache.Entry{Status: http.StatusNotFound, Body: noReportBody, Stored: now, Expires: now.Add(negTTL)})
		}
	}
	s.store.Wait() // visible before the answer goes out: the next ask is a hit
	s.shareReports(ctx, cred, ts, reports, now)
	// The reports, split once, go to every waiter with the entry.
	return bulkKind.With(&cache.Entry{Status: resp.status, Body: resp.body, Stored: now, Expires: now.Add(negTTL),
		NoStore: s.shared == nil || negTTL <= 0}, reports), nil
}
