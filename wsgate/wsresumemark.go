package wsgate

// One open connection's watermarks (resumeMark): what its writer records
// per frame written, from the frame as the hub read it (realtime.Frame,
// never the bytes again), and the list of the marks that changed since
// the last flush (resumeChanged), which is all a flush looks at.
//
// The watermarks are two slices side by side, the streams (append-only,
// shared with the records taken of them) and their timestamps, so that a
// frame written is one look-up of its stream's place and a store, and a
// record taken at a flush is one copy of the timestamps, not a map
// rebuilt: a connection's streams are fixed, its timestamps change every
// second, and the flush takes a record of each connection written to
// several times a second.

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"streamgate/realtime"
)

// resumeMark is one open connection's watermarks.
type resumeMark struct {
	id   string
	team string
	conn string // random: names the connection in its records
	// entry is the identity's index entry (resumeIndex.opened), the
	// store's until the connection ends: read under its lock.
	entry *resumeEntry
	// open: the connection is streaming, from track to end (the store's
	// lock).
	open bool
	// closedByClient is set by the read loop when the client sent a close
	// frame.
	closedByClient atomic.Bool
	// changed is the store's list of the marks to flush: the mark joins
	// it when it becomes dirty.
	changed *resumeChanged

	mu sync.Mutex
	// streams[i]'s watermark is ts[i]; at is each stream's place. streams
	// only grows (a stream's first frame), and the records taken share
	// it: never change an element.
	streams []string
	ts      []int64
	at      map[string]int
	// addr[i] is the address and length of the string streams[i] was
	// last set by: the hub gives every frame of a stream the same ID
	// string (realtime.Frame.Stream), so a frame's place is found by
	// comparing addresses, a word each, instead of hashing its 66-byte
	// ID into at; at answers the rest (a stream's first frame, a
	// frame of a fill with an ID of its own). Up to markScan streams;
	// the pointers keep those bytes alive, so an address is never
	// another string's while it is held here.
	addr []streamAddr
	// newest is the newest of ts: the record's expiry counts from it.
	newest int64
	// dirty: marks changed since the last flush (the mark is then on
	// changed's list, once).
	dirty bool
	// unread, while the client's previous record is still to be read (it
	// could not be when the client connected), are the marks it was
	// resumed from instead; since is when it connected, and missed
	// counts the seconds the record shows it missed.
	unread map[string]int64
	since  time.Time
	missed func(n int64)
}

// resumeChanged lists the marks whose watermarks changed since the last
// flush, each once: a flush writes these, not every connection open.
type resumeChanged struct {
	mu    sync.Mutex
	marks []*resumeMark
	spare []*resumeMark // the list taken before, given back (done)
}

func (c *resumeChanged) add(m *resumeMark) {
	c.mu.Lock()
	c.marks = append(c.marks, m)
	c.mu.Unlock()
}

// take returns the marks listed and empties the list.
func (c *resumeChanged) take() []*resumeMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	ms := c.marks
	c.marks, c.spare = c.spare, nil
	return ms
}

// done gives back a list take returned, emptied, to list the marks in
// after the next take: the list is not grown anew at every flush.
func (c *resumeChanged) done(ms []*resumeMark) {
	clear(ms)
	c.mu.Lock()
	c.spare = ms[:0]
	c.mu.Unlock()
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
	m := &resumeMark{id: id, team: team, conn: hex.EncodeToString(rnd[:]), at: make(map[string]int, len(from)),
		streams: make([]string, 0, len(from)), ts: make([]int64, 0, len(from)), changed: &s.changed}
	for k, v := range from {
		m.set(k, v)
	}
	if missed != nil {
		m.unread, m.since, m.missed = maps(from), s.now(), missed
	}
	s.mu.Lock()
	m.open = true
	if missed != nil {
		s.unread[m] = struct{}{}
	}
	m.entry = s.index.opened(id)
	s.mu.Unlock()
	return m
}

// written records that frames were written to the client: per frame, a
// look at its stream's watermark; the first change since the last flush
// lists the mark for the next.
func (m *resumeMark) written(frames []*realtime.Frame) {
	m.mu.Lock()
	listed := m.dirty
	for _, f := range frames {
		if m.set(string(f.Stream), f.ObservationsTimestamp) {
			m.dirty = true
		}
	}
	list := m.dirty && !listed
	m.mu.Unlock()
	if list {
		m.changed.add(m)
	}
}

// streamAddr is where a string's bytes are, and how many.
type streamAddr struct {
	p *byte
	n int
}

// markScan is how many streams a mark finds a frame's place among by
// the address of its ID (resumeMark.addr); beyond, by the map alone.
const markScan = 16

// place returns stream's place in m.streams, and whether it has one: by
// the address of its bytes when it is a string seen before (the hub's
// ID of the stream), else by the map, remembering the address.
func (m *resumeMark) place(stream string) (int, bool) {
	a := streamAddr{unsafe.StringData(stream), len(stream)}
	for i, b := range m.addr {
		// The same address and length are the same string: the
		// address held keeps its bytes from being reused.
		if a == b {
			return i, true
		}
	}
	i, have := m.at[stream]
	if have && i < len(m.addr) {
		m.addr[i] = a
	}
	return i, have
}

// set raises stream's watermark to ts and reports whether it rose (or is
// the stream's first). m.mu is held, or m is not shared yet.
func (m *resumeMark) set(stream string, ts int64) bool {
	i, have := m.place(stream)
	switch {
	case !have:
		m.at[stream] = len(m.streams)
		if len(m.streams) < markScan {
			m.addr = append(m.addr, streamAddr{unsafe.StringData(stream), len(stream)})
		}
		m.streams = append(m.streams, stream)
		m.ts = append(m.ts, ts)
	case ts > m.ts[i]:
		m.ts[i] = ts
	default:
		return false
	}
	m.newest = max(m.newest, ts)
	return true
}

// record returns m's record, written at (Unix milliseconds): the streams
// shared, the timestamps copied at the end of buf (the flush's, reused
// between flushes; nil: a slice of their own), and buf with them. m.mu
// is held.
func (m *resumeMark) record(at int64, buf []int64) (resumeRecord, []int64) {
	n, off := len(m.streams), len(buf)
	buf = append(buf, m.ts...)
	return resumeRecord{At: at, Conn: m.conn, streams: m.streams[:n:n], ts: buf[off : off+n : off+n], newest: m.newest}, buf
}

// end stops tracking m: its watermarks are written once more, or deleted
// when the client closed the connection itself. drained: this replica's
// shutdown closed it, and its record is outside the bounds (resumeIndex).
func (s *resumeStore) end(m *resumeMark, clientClosed, drained bool) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	m.open = false
	delete(s.unread, m)
	s.index.closed(m.entry)
	s.mu.Unlock()
	s.settle([]*resumeMark{m})
	if clientClosed {
		s.forget(m.id)
		return
	}
	m.mu.Lock()
	rec, _ := m.record(time.Now().UnixMilli(), nil)
	m.mu.Unlock()
	s.store([]resumeWrite{{id: m.id, team: m.team, rec: rec}}, drained)
}

func maps(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
