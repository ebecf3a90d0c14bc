package wsgate

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"streamgate/feedid"
	"streamgate/realtime"
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
	wmu    sync.Mutex
	mu     sync.Mutex
	mem    map[string]resumeRecord  // memory only
	index  *resumeIndex             // the records written, within their bounds
	open   map[*resumeMark]struct{} // the connections streaming
	stop   chan struct{}
	done   chan struct{}
	start  sync.Once // the flusher starts with the first connection
	logged time.Time
}

func newResumeStore(window time.Duration, perTeam, total int, rc redis.UniversalClient, log *zap.Logger, now func() time.Time, m *Metrics) *resumeStore {
	s := &resumeStore{window: window, rc: rc, log: log, now: now, metrics: m, index: newResumeIndex(perTeam, total),
		mem: map[string]resumeRecord{}, open: map[*resumeMark]struct{}{},
		stop: make(chan struct{}), done: make(chan struct{})}
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
// frames written (realtime.FrameTime), in canonical form.
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

// newest returns the newest watermark of marks; 0 for none.
func newest(marks map[string]int64) int64 {
	var n int64
	for _, ts := range marks {
		n = max(n, ts)
	}
	return n
}

// ttl is how long a record of marks is worth keeping from now: until its
// newest watermark is a window old; <= 0 when it already is.
func (s *resumeStore) ttl(marks map[string]int64) time.Duration {
	return time.Unix(newest(marks), 0).Add(s.window).Sub(s.now())
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
		rec, ok = s.mem[id]
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
	if s.rc == nil {
		delete(s.mem, id)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), resumeIOTimeout)
	defer cancel()
	if err := s.rc.Del(ctx, resumeKey(id)).Err(); err != nil {
		s.failed(err)
	}
}

// resumeMark is one open connection's watermarks.
type resumeMark struct {
	id   string
	team string
	conn string // random: names the connection in its records
	// closedByClient is set by the read loop when the client sent a close
	// frame.
	closedByClient atomic.Bool

	mu    sync.Mutex
	marks map[string]int64
	dirty bool
	// unread, while the client's previous record is still to be read (it
	// could not be when the client connected), are the marks it was
	// resumed from instead; since is when it connected, and missed
	// counts the seconds the record shows it missed.
	unread map[string]int64
	since  time.Time
	missed func(n int64)
}

// track registers a connection of team's, identity id, whose watermarks
// start at from (nil: none). missed non-nil: the client's record could
// not be read and from are the marks load gave instead; the record is
// read again at every flush until Redis answers, and missed is given
// the seconds it shows the client may have missed.
func (s *resumeStore) track(team, id string, from map[string]int64, missed func(n int64)) *resumeMark {
	s.start.Do(func() { go s.run() })
	var rnd [8]byte
	rand.Read(rnd[:])
	m := &resumeMark{id: id, team: team, conn: hex.EncodeToString(rnd[:]), marks: map[string]int64{}}
	for k, v := range from {
		m.marks[k] = v
	}
	if missed != nil {
		m.unread, m.since, m.missed = maps(from), s.now(), missed
	}
	s.mu.Lock()
	s.open[m] = struct{}{}
	s.index.opened(id)
	s.mu.Unlock()
	return m
}

// written records that frames were written to the client.
func (m *resumeMark) written(frames [][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range frames {
		feed, ts, ok := realtime.FrameTime(f)
		if !ok {
			continue
		}
		if cur, have := m.marks[string(feed)]; !have || ts > cur {
			m.marks[string(feed)] = ts
			m.dirty = true
		}
	}
}

// end stops tracking m: its watermarks are written once more, or deleted
// when the client closed the connection itself. drained: this replica's
// shutdown closed it, and its record is outside the bounds (resumeIndex).
func (s *resumeStore) end(m *resumeMark, clientClosed, drained bool) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	delete(s.open, m)
	s.index.closed(m.id)
	s.mu.Unlock()
	s.settle([]*resumeMark{m})
	if clientClosed {
		s.forget(m.id)
		return
	}
	m.mu.Lock()
	rec := resumeRecord{At: time.Now().UnixMilli(), Conn: m.conn, Marks: maps(m.marks)}
	m.mu.Unlock()
	s.write(map[string]resumeRecord{m.id: rec}, map[string]string{m.id: m.team}, drained)
}

func maps(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// run writes the watermarks that changed every resumeFlush, and drops
// the memory records past the window.
func (s *resumeStore) run() {
	defer close(s.done)
	t := time.NewTicker(resumeFlush)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.flush()
	}
}

// flush writes the records of the connections whose watermarks changed.
func (s *resumeStore) flush() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	at := time.Now().UnixMilli() // the drain compares it with its own wall clock
	recs := map[string]resumeRecord{}
	teams := map[string]string{}
	var unread []*resumeMark
	s.mu.Lock()
	for m := range s.open {
		m.mu.Lock()
		if m.unread != nil {
			unread = append(unread, m)
		}
		m.mu.Unlock()
	}
	s.mu.Unlock()
	s.settle(unread)
	s.mu.Lock()
	for m := range s.open {
		m.mu.Lock()
		if m.dirty && m.unread == nil {
			m.dirty = false
			recs[m.id] = resumeRecord{At: at, Conn: m.conn, Marks: maps(m.marks)}
			teams[m.id] = m.team
		}
		m.mu.Unlock()
	}
	if s.rc == nil {
		for id, r := range s.mem {
			if s.ttl(r.Marks) <= 0 {
				delete(s.mem, id)
			}
		}
	}
	s.index.prune(s.now())
	s.metrics.resumeRecordsKept(s.index.len())
	s.mu.Unlock()
	if len(recs) > 0 {
		s.write(recs, teams, false)
	}
}

// settle reads again the records of ms that could not be read when their
// clients connected (in one pipeline) and counts, for each that Redis
// now answers, the seconds its client may have missed: per stream, those
// after the record's watermark up to the mark it was resumed from, for a
// watermark that was within the window when it connected. A record Redis
// says is not there (expired, or lost with the writes a failover did not
// replicate) shows nothing. After a window the record has expired anyway:
// its mark stops waiting for it.
func (s *resumeStore) settle(ms []*resumeMark) {
	var wait []*resumeMark
	for _, m := range ms {
		m.mu.Lock()
		if m.unread != nil {
			wait = append(wait, m)
		}
		m.mu.Unlock()
	}
	if len(wait) == 0 || s.rc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resumeIOTimeout)
	defer cancel()
	cmds := make([]*redis.StringCmd, len(wait))
	_, _ = s.rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range wait {
			cmds[i] = p.Get(ctx, resumeKey(m.id))
		}
		return nil
	})
	now := s.now()
	for i, m := range wait {
		b, err := cmds[i].Bytes()
		rec, ok, err := s.decode(b, err)
		m.mu.Lock()
		if err != nil {
			if now.Sub(m.since) >= s.window {
				m.unread = nil
			}
			m.mu.Unlock()
			continue
		}
		var n int64
		oldest := m.since.Add(-s.window).Unix()
		for f, mark := range rec.Marks {
			if from, have := m.unread[f]; ok && have && mark >= oldest && mark < from {
				n += from - mark
			}
		}
		m.unread = nil
		missed := m.missed
		m.mu.Unlock()
		if n > 0 {
			missed(n)
			s.log.Warn("stream client resumed without its record: seconds before its resume window may be missing",
				zap.Int64("seconds_missed", n))
		}
	}
}

// write stores recs (teams names the team of each; drained: written by
// connections this replica's shutdown closed): in memory, or in one Redis
// pipeline, each expiring a window after its newest watermark; a record
// whose newest watermark is a window old already is deleted instead, as
// are the records dropped to stay within the bounds (resumeIndex),
// counted, each only while it is still the one this replica wrote.
func (s *resumeStore) write(recs map[string]resumeRecord, teams map[string]string, drained bool) {
	now := s.now()
	var drops []resumeDrop
	s.mu.Lock()
	for id, r := range recs {
		if ttl := s.ttl(r.Marks); ttl >= time.Millisecond {
			drops = append(drops, s.index.put(id, teams[id], r.Conn, now.Add(ttl), drained)...)
		} else {
			s.index.remove(id)
		}
	}
	s.metrics.resumeRecordsKept(s.index.len())
	for _, d := range drops {
		s.metrics.resumeRecordDropped(d.reason)
		delete(recs, d.id) // written in this batch, then dropped by a later one
	}
	if s.rc == nil {
		for id, r := range recs {
			if s.ttl(r.Marks) >= time.Millisecond {
				s.mem[id] = r
			} else {
				delete(s.mem, id)
			}
		}
		for _, d := range drops {
			if s.mem[d.id].Conn == d.conn {
				delete(s.mem, d.id)
			}
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), resumeIOTimeout)
	defer cancel()
	_, err := s.rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range drops {
			resumeDropScript.Eval(ctx, p, []string{resumeKey(d.id)}, d.conn)
		}
		for id, r := range recs {
			ttl := s.ttl(r.Marks)
			if ttl < time.Millisecond {
				p.Del(ctx, resumeKey(id))
				continue
			}
			b, _ := json.Marshal(r)
			p.Set(ctx, resumeKey(id), b, ttl)
		}
		return nil
	})
	if err != nil {
		s.failed(err)
	}
}

// resumeDropScript deletes a record (KEYS[1]) dropped to stay within the
// bounds only while the connection ARGV[1] wrote it last: a client that
// has since connected to another replica has its record rewritten there,
// and deleting it would make the client start live.
var resumeDropScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local ok, rec = pcall(cjson.decode, v)
if ok and type(rec) == 'table' and rec.conn == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

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
