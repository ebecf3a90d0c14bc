package wsgate

// The resume records' upkeep: the flush every resumeFlush of the marks
// that changed since the last (resumeChanged's list, not every connection
// open), the records that could not be read when their clients connected
// read again (settle), and the writes: in memory, on the identity's
// index entry with an expiry each (resumeExpiryHeap, not a walk of every
// record kept), or in one Redis pipeline with a TTL each. A connection's
// record goes through the entry it got when tracked (resumeMark.entry),
// its timestamps through buffers kept between flushes: a flush hashes no
// identity and allocates nothing per connection.

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// newest returns the newest watermark of marks; 0 for none.
func newest(marks map[string]int64) int64 {
	var n int64
	for _, ts := range marks {
		n = max(n, ts)
	}
	return n
}

// expires is when r is no longer worth keeping: its newest watermark a
// window old. The newest is the one its mark kept (resumeMark.newest), or
// read from the marks for a record made otherwise.
func (s *resumeStore) expires(r resumeRecord) time.Time {
	n := r.newest
	if n == 0 {
		n = newest(r.Marks)
	}
	return time.Unix(n, 0).Add(s.window)
}

// ttl is how long r is worth keeping from now; <= 0 when it no longer is.
func (s *resumeStore) ttl(r resumeRecord) time.Duration {
	return s.expires(r).Sub(s.now())
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

// flush writes the records of the connections whose watermarks changed
// since the last flush (the marks listed in s.changed), and forgets the
// records that expired. Its work is what changed: the marks written to
// since, the records still unread, the records due; never a walk of
// every connection or record kept.
func (s *resumeStore) flush() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	at := time.Now().UnixMilli() // the drain compares it with its own wall clock
	recs, ts := s.batch[:0], s.ts[:0]
	s.mu.Lock()
	unread := make([]*resumeMark, 0, len(s.unread))
	for m := range s.unread {
		unread = append(unread, m)
	}
	s.mu.Unlock()
	s.settle(unread)
	changed := s.changed.take()
	var again []*resumeMark
	s.mu.Lock()
	for _, m := range unread {
		m.mu.Lock()
		if m.unread == nil {
			delete(s.unread, m)
		}
		m.mu.Unlock()
	}
	for _, m := range changed {
		if !m.open {
			continue // ended: its end wrote its record
		}
		m.mu.Lock()
		switch {
		case m.unread != nil:
			again = append(again, m) // written once its old record is read
		case m.dirty:
			m.dirty = false
			var rec resumeRecord
			rec, ts = m.record(at, ts)
			recs = append(recs, resumeWrite{id: m.id, team: m.team, rec: rec, entry: m.entry})
		}
		m.mu.Unlock()
	}
	s.index.prune(s.now())
	s.metrics.resumeRecordsKept(s.index.len())
	s.mu.Unlock()
	for _, m := range again {
		s.changed.add(m)
	}
	s.changed.done(changed)
	if len(recs) > 0 {
		s.store(recs, false)
	}
	clear(recs) // hold no record until the next flush
	s.batch, s.ts = recs[:0], ts[:0]
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

// resumeWrite is one record to write: id's, of team's. entry, if not
// nil, is id's (resumeMark.entry: the flush's records, of connections
// open); key is id's Redis key, filled by store.
type resumeWrite struct {
	id, team string
	rec      resumeRecord
	entry    *resumeEntry
	key      string
}

// write stores recs (teams names the team of each); see store.
func (s *resumeStore) write(recs map[string]resumeRecord, teams map[string]string, drained bool) {
	ws := make([]resumeWrite, 0, len(recs))
	for id, r := range recs {
		ws = append(ws, resumeWrite{id: id, team: teams[id], rec: r})
	}
	s.store(ws, drained)
}

// store writes recs, in order, a later one of an id over an earlier
// (drained: written by connections this replica's shutdown closed): in
// memory (on the identity's index entry), or in one Redis pipeline, each
// expiring a window after its newest watermark; a record whose newest
// watermark is a window old already is deleted instead, as are the
// records dropped to stay within the bounds (resumeIndex), counted, each
// only while it is still the one this replica wrote. A record of a
// connection open (resumeWrite.entry) is filed under its entry as it is,
// without a look-up of its identity.
func (s *resumeStore) store(recs []resumeWrite, drained bool) {
	now := s.now()
	var drops []resumeDrop
	s.mu.Lock()
	for i := range recs {
		w := &recs[i]
		e := w.entry
		if e == nil {
			e = s.index.byID[w.id]
		}
		exp := s.expires(w.rec)
		if exp.Sub(now) < time.Millisecond {
			if e != nil {
				s.index.forget(e)
			}
			w.key = resumeKey(w.id)
			continue
		}
		if e == nil {
			e = s.index.entry(w.id)
		}
		drops = append(drops, s.index.putEntry(e, w.team, w.rec.Conn, exp, drained)...)
		if s.rc == nil {
			// The entry's record holds a copy of its own: w.rec's
			// timestamps are the flush's buffer, reused by the next.
			own := e.rec.ts[:0]
			e.rec = w.rec
			e.rec.ts = append(own, w.rec.ts...)
		} else if w.key = e.key; w.key == "" {
			e.key = resumeKey(e.id)
			w.key = e.key
		}
	}
	s.metrics.resumeRecordsKept(s.index.len())
	if len(drops) > 0 {
		// Written in this batch, then dropped by a later one: not written.
		dropped := make(map[string]bool, len(drops))
		for _, d := range drops {
			s.metrics.resumeRecordDropped(d.reason)
			dropped[d.id] = true
		}
		recs = slices.DeleteFunc(slices.Clone(recs), func(w resumeWrite) bool { return dropped[w.id] })
	}
	s.mu.Unlock()
	if s.rc == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), resumeIOTimeout)
	defer cancel()
	_, err := s.rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, d := range drops {
			resumeDropScript.Eval(ctx, p, []string{resumeKey(d.id)}, d.conn)
		}
		for _, w := range recs {
			ttl := s.ttl(w.rec)
			if ttl < time.Millisecond {
				p.Del(ctx, w.key)
				continue
			}
			b, _ := json.Marshal(w.rec.withMarks())
			p.Set(ctx, w.key, b, ttl)
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
