// Package usage is the usage ledger: per UTC day, network and team, the
// requests answered by endpoint and result class, the reports delivered
// over REST and over the stream (frames), the upstream calls made on the
// team's behalf and the bytes sent. An organisation bills and audits its
// teams from it (GET /usage.json on the admin listener, streamgate usage).
//
// The request path only adds to a tally in memory (a map under a mutex
// held for the increments, never across I/O); a flusher moves the tally
// to the store every FlushInterval and at Close. The store is Redis when
// the gateway has Redis, shared by every replica and kept across restarts
// (one hash per day, expiring Retention after the day's end), else a map
// in this process, which a restart empties.
//
// The figures are bounded by the configuration: a day's fields are at
// most networks × teams (and "" for requests without a team) × (endpoints
// × result classes + 5); no stream ID, key ID or client address is kept.
package usage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Retention is how long a day's figures are kept after the day ends (in
// Redis, the day's hash expires then; in memory, the day is dropped at the
// first flush after it): more than a year, so that a year's bills can be
// compared with the year before's last month.
const Retention = 400 * 24 * time.Hour

// DefaultFlushInterval is how often the tally goes to the store when
// Config.FlushInterval is zero: the figures another replica reads lag this
// replica's by at most this.
const DefaultFlushInterval = 5 * time.Second

// DayLayout is the form of a day: the UTC date, as /usage.json takes it.
const DayLayout = "2006-01-02"

// The result classes of a request: its status's class, with 429 (a quota
// or rate refusal) apart from the other client errors and 499 (the client
// went away) among them.
const (
	Class1xx = "1xx" // 101: a WebSocket upgrade accepted
	Class2xx = "2xx"
	Class3xx = "3xx"
	Class4xx = "4xx"
	Class429 = "429"
	Class5xx = "5xx"
)

// ClassOf returns the result class of status.
func ClassOf(status int) string {
	switch {
	case status == 429:
		return Class429
	case status < 200:
		return Class1xx
	case status < 300:
		return Class2xx
	case status < 400:
		return Class3xx
	case status < 500:
		return Class4xx
	}
	return Class5xx
}

// The figures of a (day, network, team) besides the requests, as their
// fields are named in the store.
const (
	fieldReports     = "reports"
	fieldFrames      = "frames"
	fieldCalls       = "calls"
	fieldRESTBytes   = "rest_bytes"
	fieldStreamBytes = "stream_bytes"
	fieldRequests    = "req" // req|endpoint|class
)

// sep joins a field's parts: no network name (a-z, 0-9, -), team name
// (A-Z, a-z, 0-9, ., _, -) or endpoint name holds it.
const sep = "|"

// Row is the figures of one team on one network on one day.
type Row struct {
	Day     string `json:"day"`
	Network string `json:"network"`
	// Team is "" for the requests no team made: refused before
	// authentication, or unsigned discovery.
	Team string `json:"team"`
	// Requests is every request answered; ByEndpoint splits them by
	// endpoint and result class.
	Requests   int64                       `json:"requests"`
	ByEndpoint map[string]map[string]int64 `json:"by_endpoint"`
	// Reports is the reports delivered over REST (a bulk answer's or a
	// page's each count); Frames the reports delivered over the stream.
	Reports int64 `json:"reports"`
	Frames  int64 `json:"frames"`
	// UpstreamCalls is the calls made on the team's behalf (see README,
	// "Usage ledger": a call several requests waited on counts once, to
	// the request that made it).
	UpstreamCalls int64 `json:"upstream_calls"`
	// RESTBytes and StreamBytes are the bytes sent: answer bodies, and
	// stream frames with their headers; Bytes their sum.
	RESTBytes   int64 `json:"rest_bytes"`
	StreamBytes int64 `json:"stream_bytes"`
	Bytes       int64 `json:"bytes"`
}

// cell is one counter of the tally: a day, a network, a team and a field
// (for the requests, with their endpoint and class). Its parts are kept
// apart, so that recording a request makes no string.
type cell struct {
	day, network, team, field string
	endpoint, class           string // fieldRequests only
}

// name is the cell's field in the store: "network|team|field", or
// "network|team|req|endpoint|class".
func (c cell) name() string {
	if c.field == fieldRequests {
		return c.network + sep + c.team + sep + c.field + sep + c.endpoint + sep + c.class
	}
	return c.network + sep + c.team + sep + c.field
}

// dayText is a UTC day and its text, kept while the clock is in it.
type dayText struct {
	start, end int64 // Unix seconds, end excluded
	text       string
}

// store keeps the flushed figures.
type store interface {
	// add adds a batch of day's counts to the store, once: a batch of
	// replica's whose seq is not above the last it applied for day is
	// not applied again.
	add(ctx context.Context, replica string, day time.Time, seq int64, counts map[string]int64) error
	// read returns the figures of each day in days (field → value).
	read(ctx context.Context, days []time.Time) ([]map[string]int64, error)
	// shared says whether every replica writes the same store.
	shared() bool
}

// Config is a Ledger's settings; every field may be left zero.
type Config struct {
	// Now is the clock that decides a figure's day. Nil: time.Now.
	Now func() time.Time
	// FlushInterval is how often the tally goes to the store. Zero:
	// DefaultFlushInterval.
	FlushInterval time.Duration
	// Logger receives the flush failures (at most one line a minute).
	Logger *zap.Logger
}

// Ledger records usage. A nil *Ledger records nothing. It is safe for
// concurrent use.
type Ledger struct {
	st       store
	now      func() time.Time
	interval time.Duration
	log      *zap.Logger

	mu    sync.Mutex
	tally map[cell]int64

	flushMu  sync.Mutex // one flush at a time; guards pending, seq
	pending  []*batch   // batches not yet written, in order
	seq      int64      // the last batch's sequence number
	replica  string     // this ledger's name in the store's sequence records
	logged   time.Time  // the last flush failure logged
	stop     chan struct{}
	done     chan struct{}
	day      atomic.Pointer[dayText] // the day of the last record
	stopOnce sync.Once
	started  atomic.Bool
}

// NewMemory returns a ledger kept in this process: a restart loses it.
func NewMemory(cfg Config) *Ledger { return newLedger(newMemStore(), cfg) }

func newLedger(st store, cfg Config) *Ledger {
	l := &Ledger{st: st, now: cfg.Now, interval: cfg.FlushInterval, log: cfg.Logger,
		tally: map[cell]int64{}, stop: make(chan struct{}), done: make(chan struct{}), replica: newReplicaID()}
	if l.now == nil {
		l.now = time.Now
	}
	if l.interval <= 0 {
		l.interval = DefaultFlushInterval
	}
	if l.log == nil {
		l.log = zap.NewNop()
	}
	return l
}

// Shared says whether the ledger is the fleet's (in Redis): its figures
// are every replica's and outlive a restart.
func (l *Ledger) Shared() bool { return l != nil && l.st.shared() }

// dayOf returns the UTC day of t.
func dayOf(t time.Time) string { return t.UTC().Format(DayLayout) }

// dayAt returns the UTC day of t, its text made once a day.
func (l *Ledger) dayAt(t time.Time) string {
	u := t.Unix()
	if d := l.day.Load(); d != nil && u >= d.start && u < d.end {
		return d.text
	}
	utc := t.UTC()
	start := time.Date(utc.Year(), utc.Month(), utc.Day(), 0, 0, 0, 0, time.UTC)
	d := &dayText{start: start.Unix(), end: start.AddDate(0, 0, 1).Unix(), text: start.Format(DayLayout)}
	l.day.Store(d)
	return d.text
}

// Request records one answered request of team's on network, at at (the
// request's reading of the ledger's clock; zero: read now): its endpoint
// (the route's name), its status, the reports its answer delivered and
// the bytes of its body.
func (l *Ledger) Request(at time.Time, network, team, endpoint string, status, reports int, bytes int64) {
	if l == nil {
		return
	}
	if at.IsZero() {
		at = l.now()
	}
	day := l.dayAt(at)
	l.mu.Lock()
	l.tally[cell{day: day, network: network, team: team, field: fieldRequests, endpoint: endpoint, class: ClassOf(status)}]++
	if reports > 0 {
		l.tally[cell{day: day, network: network, team: team, field: fieldReports}] += int64(reports)
	}
	if bytes > 0 {
		l.tally[cell{day: day, network: network, team: team, field: fieldRESTBytes}] += bytes
	}
	l.mu.Unlock()
}

// UpstreamCall records one upstream call made for a request of team's on
// network.
func (l *Ledger) UpstreamCall(network, team string) {
	if l == nil {
		return
	}
	day := l.dayAt(l.now())
	l.mu.Lock()
	l.tally[cell{day: day, network: network, team: team, field: fieldCalls}]++
	l.mu.Unlock()
}

// Frames records frames written to a stream client of team's on network,
// bytes with their frame headers.
func (l *Ledger) Frames(network, team string, frames int, bytes int64) {
	if l == nil || frames <= 0 {
		return
	}
	day := l.dayAt(l.now())
	l.mu.Lock()
	l.tally[cell{day: day, network: network, team: team, field: fieldFrames}] += int64(frames)
	l.tally[cell{day: day, network: network, team: team, field: fieldStreamBytes}] += bytes
	l.mu.Unlock()
}

// Start runs the flusher until Close.
func (l *Ledger) Start() {
	if l == nil || !l.started.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer close(l.done)
		t := time.NewTicker(l.interval)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), l.interval)
				if err := l.Flush(ctx); err != nil {
					l.failed(err)
				}
				cancel()
			}
		}
	}()
}

// failed logs a flush failure, at most once a minute; the tally is kept
// for the next flush.
func (l *Ledger) failed(err error) {
	now := time.Now()
	if now.Sub(l.logged) < time.Minute {
		return
	}
	l.logged = now
	l.log.Warn("usage ledger: flush failed; the figures are kept for the next flush", zap.Error(err))
}

// Close stops the flusher and flushes what is left, within ctx. Figures
// that could not be written are logged, with their count, and lost.
func (l *Ledger) Close(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.stopOnce.Do(func() { close(l.stop) })
	if l.started.Load() {
		<-l.done
	}
	err := l.Flush(ctx)
	if err != nil {
		l.log.Warn("usage ledger: figures not written at shutdown", zap.Int("fields", l.Pending()), zap.Error(err))
	}
	return err
}

// batch is one day's counts as one write to the store: its sequence
// number makes the write idempotent (the store applies a replica's batch
// of a day once, and only after the ones before it), so that a write
// whose reply was lost is sent again as it was, never counted twice.
type batch struct {
	day    time.Time
	seq    int64
	counts map[string]int64 // "network|team|field" → count
	sent   bool             // tried once: it may have been applied, so it is only sent again, never merged
}

// Flush moves the tally to the store. A batch that fails is kept and sent
// again, as it was, before anything newer; the tally meanwhile gathers in
// one unsent batch per day, so what waits for the store stays bounded.
func (l *Ledger) Flush(ctx context.Context) error {
	if l == nil {
		return nil
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	l.mu.Lock()
	var tally map[cell]int64 // taken whole, so that it is read outside the lock
	if len(l.tally) > 0 {
		tally, l.tally = l.tally, make(map[cell]int64, len(l.tally))
	}
	l.mu.Unlock()

	for c, n := range tally {
		day, _ := time.Parse(DayLayout, c.day)
		b := l.unsent(day)
		b.counts[c.name()] += n
	}
	for len(l.pending) > 0 {
		b := l.pending[0]
		b.sent = true
		if err := l.st.add(ctx, l.replica, b.day, b.seq, b.counts); err != nil {
			return err
		}
		l.pending = l.pending[1:]
	}
	l.pending = nil
	return nil
}

// unsent returns the batch of day not sent yet, made (with the next
// sequence number) when there is none.
func (l *Ledger) unsent(day time.Time) *batch {
	for _, b := range l.pending {
		if !b.sent && b.day.Equal(day) {
			return b
		}
	}
	l.seq++
	b := &batch{day: day, seq: l.seq, counts: map[string]int64{}}
	l.pending = append(l.pending, b)
	return b
}

// Pending returns how many fields wait for the store (a failed flush's).
func (l *Ledger) Pending() int {
	if l == nil {
		return 0
	}
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	n := 0
	for _, b := range l.pending {
		n += len(b.counts)
	}
	l.mu.Lock()
	n += len(l.tally)
	l.mu.Unlock()
	return n
}

// Day returns today, the UTC date of the ledger's clock.
func (l *Ledger) Day() time.Time {
	now := time.Now
	if l != nil {
		now = l.now
	}
	d, _ := time.Parse(DayLayout, dayOf(now()))
	return d
}

// Today returns today's figures (UTC), after flushing this replica's
// tally: what the status page shows per team.
func (l *Ledger) Today(ctx context.Context) ([]Row, error) {
	d := l.Day()
	return l.Read(ctx, d, d, "")
}

// Read returns the figures of the days from through to (UTC dates, both
// included), of team when not "", after flushing this replica's tally
// (another replica's reaches the store within its flush interval). Rows
// are in order of day, network and team. The span is at most Retention.
func (l *Ledger) Read(ctx context.Context, from, to time.Time, team string) ([]Row, error) {
	if l == nil {
		return nil, nil
	}
	if err := l.Flush(ctx); err != nil {
		return nil, err
	}
	var days []time.Time
	for d := from; !d.After(to); d = d.AddDate(0, 0, 1) {
		days = append(days, d)
		if len(days) > MaxDays {
			return nil, fmt.Errorf("usage: at most %d days at once", MaxDays)
		}
	}
	counts, err := l.st.read(ctx, days)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for i, d := range days {
		rows = appendRows(rows, d.Format(DayLayout), counts[i], team)
	}
	return rows, nil
}

// MaxDays is the most days one Read covers: the retention and today.
const MaxDays = int(Retention/(24*time.Hour)) + 1

// appendRows appends the rows of one day's fields, of team when not "".
func appendRows(rows []Row, day string, counts map[string]int64, team string) []Row {
	type key struct{ network, team string }
	byKey := map[key]*Row{}
	for f, n := range counts {
		parts := strings.Split(f, sep)
		if len(parts) < 3 {
			continue
		}
		k := key{parts[0], parts[1]}
		if team != "" && k.team != team {
			continue
		}
		r := byKey[k]
		if r == nil {
			r = &Row{Day: day, Network: k.network, Team: k.team, ByEndpoint: map[string]map[string]int64{}}
			byKey[k] = r
		}
		switch parts[2] {
		case fieldRequests:
			if len(parts) != 5 {
				continue
			}
			m := r.ByEndpoint[parts[3]]
			if m == nil {
				m = map[string]int64{}
				r.ByEndpoint[parts[3]] = m
			}
			m[parts[4]] += n
			r.Requests += n
		case fieldReports:
			r.Reports += n
		case fieldFrames:
			r.Frames += n
		case fieldCalls:
			r.UpstreamCalls += n
		case fieldRESTBytes:
			r.RESTBytes += n
		case fieldStreamBytes:
			r.StreamBytes += n
		}
		r.Bytes = r.RESTBytes + r.StreamBytes
	}
	start := len(rows)
	for _, r := range byKey {
		rows = append(rows, *r)
	}
	added := rows[start:]
	sort.Slice(added, func(i, j int) bool {
		if added[i].Network != added[j].Network {
			return added[i].Network < added[j].Network
		}
		return added[i].Team < added[j].Team
	})
	return rows
}

// ParseDay reads a day as /usage.json takes it (YYYY-MM-DD).
func ParseDay(s string) (time.Time, error) {
	t, err := time.Parse(DayLayout, s)
	if err != nil || t.Format(DayLayout) != s {
		return time.Time{}, fmt.Errorf("%q is not a date YYYY-MM-DD", s)
	}
	return t, nil
}

// memStore is the store of a ledger without Redis.
type memStore struct {
	mu   sync.Mutex
	days map[string]map[string]int64
}

func newMemStore() *memStore { return &memStore{days: map[string]map[string]int64{}} }

func (m *memStore) shared() bool { return false }

func (m *memStore) add(_ context.Context, _ string, day time.Time, _ int64, counts map[string]int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := day.Format(DayLayout)
	d := m.days[key]
	if d == nil {
		d = map[string]int64{}
		m.days[key] = d
	}
	for f, n := range counts {
		d[f] += n
	}
	// The days past the retention go, as Redis lets them expire.
	oldest := day.Add(-Retention).Format(DayLayout)
	for k := range m.days {
		if k < oldest {
			delete(m.days, k)
		}
	}
	return nil
}

func (m *memStore) read(_ context.Context, days []time.Time) ([]map[string]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]map[string]int64, len(days))
	for i, d := range days {
		c := map[string]int64{}
		for f, n := range m.days[d.Format(DayLayout)] {
			c[f] = n
		}
		out[i] = c
	}
	return out, nil
}

// newReplicaID returns a random name for this ledger: its batches'
// sequence numbers are kept under it.
func newReplicaID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
