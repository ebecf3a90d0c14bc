package wsgate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/feedid"
)

// Resume: a client whose connection the gateway ended or lost comes back
// where it left off.
//
// A client is identified by its key ID, the network, the sorted set of its
// streams and the HA origin it named (X-Cll-Origin; an HA client's two
// connections are two clients). While it streams, the gateway keeps, per
// stream, the observationsTimestamp of the last report written to it (its
// watermark), in memory and, with the Redis limits, in Redis for every
// replica (a record per client, written at most every resumeFlush and
// when the connection ends). A client that connects with the same
// identity within the window gets, before live reports, every report
// after its watermarks (realtime.SubscribeOptions.From). A client that closed
// its connection itself (a close frame) starts afresh next time: its
// record is deleted.
//
// The window counts from the reports the client actually received: a
// stream's watermark older than realtime.resume_window (by its
// observationsTimestamp) is not resumed, and a record expires a window
// after its newest watermark. A client that reconnects and drops without
// receiving anything rewrites its record with the same watermarks, so it
// extends nothing; a resume never fetches more than a window of seconds.
//
// A record that cannot be read (Redis away: a failover, an outage) is not
// taken for a record that does not exist: the client would start from
// the first live frame of a replica that may not carry its streams yet,
// and lose the seconds in between unseen. The read is asked again for up
// to resumeReadWait; then the client gets every report of the last
// unreadWindow before live ones (at least once: the SDKs drop what they
// had by observationsTimestamp), is counted
// (streamgate_ws_resume_unread_total), and its record is read again at
// every flush until Redis answers: the seconds it may have missed before
// that window are then counted in streamgate_ws_gaps_unfilled_total.
// Meanwhile the connection's own record is not written, so as not to
// overwrite the one still to be read.

// resumeFlush is how often the watermarks of open connections are written.
const resumeFlush = 100 * time.Millisecond

// resumeIOTimeout bounds one Redis call of the resume store.
const resumeIOTimeout = 200 * time.Millisecond

// resumeReadWait bounds how long a connecting client waits for its
// record while Redis does not answer; resumeReadRetry spaces the reads.
const (
	resumeReadWait  = time.Second
	resumeReadRetry = 100 * time.Millisecond
)

// unreadWindow is how far before now a client whose record could not be
// read is resumed from (realtime.resume_window if shorter): it covers a
// reconnect within seconds of the connection's loss (a replica's crash,
// the client's own backoff), the case a Redis failover meets.
const unreadWindow = 10 * time.Second

// resumeRecord is a client's watermarks and when they were written.
type resumeRecord struct {
	At    int64            `json:"at"`   // Unix milliseconds
	Conn  string           `json:"conn"` // the connection that wrote it
	Marks map[string]int64 `json:"marks"`
	// newest is the newest of Marks, when the record was made from a
	// mark (resumeMark.newest); 0: read from Marks.
	newest int64
	// streams and ts are the watermarks of a record made from a mark
	// (resumeMark.record), Marks nil until withMarks: the flush takes
	// such records several times a second, and most are never read.
	streams []string
	ts      []int64
}

// withMarks returns r with Marks filled from streams and ts, for a
// record made from a mark; one read or decoded already is r.
func (r resumeRecord) withMarks() resumeRecord {
	if r.Marks != nil || r.streams == nil {
		return r
	}
	r.Marks = make(map[string]int64, len(r.streams))
	for i, f := range r.streams {
		r.Marks[f] = r.ts[i]
	}
	return r
}

// resumeStore keeps the clients' watermarks: in memory, and in Redis when
// the replicas share one.
type resumeStore struct {
	window  time.Duration
	rc      redis.UniversalClient // nil: memory only
	log     *zap.Logger
	now     func() time.Time
	metrics *Metrics

	// wmu orders the writes: a flush's snapshot is written before a
	// connection's end writes or deletes its record.
	wmu sync.Mutex
	mu  sync.Mutex
	// index holds the records written, within their bounds, and, in a
	// store without Redis, the records themselves.
	index  *resumeIndex
	unread map[*resumeMark]struct{} // those whose previous record is still to be read
	// changed lists the marks written to since the last flush.
	changed resumeChanged
	// batch is the flush's list of records, and ts their timestamps,
	// kept between flushes (wmu).
	batch  []resumeWrite
	ts     []int64
	stop   chan struct{}
	done   chan struct{}
	start  sync.Once // the flusher starts with the first connection
	logged time.Time
}

func newResumeStore(window time.Duration, perTeam, total int, rc redis.UniversalClient, log *zap.Logger, now func() time.Time, m *Metrics) *resumeStore {
	s := &resumeStore{window: window, rc: rc, log: log, now: now, metrics: m, index: newResumeIndex(perTeam, total),
		unread: map[*resumeMark]struct{}{},
		stop:   make(chan struct{}), done: make(chan struct{})}
	return s
}

// resumeKey is the Redis key of an identity: hashed, so that no key ID
// appears in Redis.
func resumeKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return resumeKeyPrefix + hex.EncodeToString(sum[:16])
}

// resumeID is a client's identity (see above).
func resumeID(network, keyID, origin string, feeds []feedid.ID) string {
	sorted := feedid.Strings(feeds)
	slices.Sort(sorted)
	return network + "\x00" + keyID + "\x00" + origin + "\x00" + strings.Join(sorted, ",")
}

// load returns the watermarks of id, of streams feeds, that are within
// the window: each no older than realtime.resume_window by its report's
// observationsTimestamp. When the record cannot be read within
// resumeReadWait, it returns marks unreadWindow before now for every
// stream, and unread true.
func (s *resumeStore) load(ctx context.Context, id string, feeds []feedid.ID) (marks map[string]int64, unread bool) {
	rec, ok, err := s.record(ctx, id)
	if err != nil {
		deadline := time.Now().Add(resumeReadWait)
		for err != nil && time.Now().Before(deadline) && ctx.Err() == nil {
			t := time.NewTimer(resumeReadRetry)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			rec, ok, err = s.record(ctx, id)
		}
	}
	if err != nil {
		from := s.now().Add(-min(unreadWindow, s.window)).Unix()
		marks = make(map[string]int64, len(feeds))
		for _, f := range feeds {
			marks[string(f)] = from
		}
		return marks, true
	}
	if !ok {
		return nil, false
	}
	oldest := s.now().Add(-s.window).Unix()
	marks = make(map[string]int64, len(rec.Marks))
	for f, ts := range rec.Marks {
		if ts >= oldest {
			marks[f] = ts
		}
	}
	if len(marks) == 0 {
		return nil, false
	}
	return marks, false
}

// watermarks returns marks as the hub takes them
// (realtime.SubscribeOptions.From): a record's streams are the IDs of the
// frames written (realtime.Frame.Stream), in canonical form.
func watermarks(marks map[string]int64) map[feedid.ID]int64 {
	if marks == nil {
		return nil
	}
	from := make(map[feedid.ID]int64, len(marks))
	for f, ts := range marks {
		from[feedid.ID(f)] = ts
	}
	return from
}

// reconnectedSince reports whether another connection than m's has written
// the record of m's identity since t: the client came back, here or on
// another replica.
func (s *resumeStore) reconnectedSince(ctx context.Context, m *resumeMark, t time.Time) bool {
	rec, ok, _ := s.record(ctx, m.id)
	return ok && rec.Conn != m.conn && !time.UnixMilli(rec.At).Before(t.Truncate(time.Millisecond))
}

// record reads the record of id: ok false when there is none (or it is
// not a record), err when it could not be read (Redis failed).
func (s *resumeStore) record(ctx context.Context, id string) (rec resumeRecord, ok bool, err error) {
	if s.rc == nil {
		s.mu.Lock()
		rec, ok = s.index.record(id)
		s.mu.Unlock()
		return rec, ok, nil
	}
	ctx, cancel := context.WithTimeout(ctx, resumeIOTimeout)
	defer cancel()
	b, err := s.rc.Get(ctx, resumeKey(id)).Bytes()
	return s.decode(b, err)
}

// decode is the record of a GET's answer (see record).
func (s *resumeStore) decode(b []byte, err error) (rec resumeRecord, ok bool, _ error) {
	switch {
	case err == redis.Nil:
		return rec, false, nil
	case err != nil:
		s.failed(err)
		return rec, false, err
	case json.Unmarshal(b, &rec) != nil:
		return rec, false, nil
	}
	return rec, true, nil
}

// forget deletes the record of id.
func (s *resumeStore) forget(id string) {
	s.mu.Lock()
	s.index.remove(id)
	s.metrics.resumeRecordsKept(s.index.len())
	s.mu.Unlock()
	if s.rc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resumeIOTimeout)
	defer cancel()
	if err := s.rc.Del(ctx, resumeKey(id)).Err(); err != nil {
		s.failed(err)
	}
}

// failed logs a Redis failure at most once a minute; resume then starts
// clients live.
func (s *resumeStore) failed(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.logged) < time.Minute {
		return
	}
	s.logged = time.Now()
	s.log.Warn("stream resume record in Redis failed: clients may start live", zap.Error(err))
}

// close stops the flusher after one last flush.
func (s *resumeStore) close() {
	started := true
	s.start.Do(func() { started = false })
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	if started {
		<-s.done
		s.flush()
	}
}
