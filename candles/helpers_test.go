package candles_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"streamgate/archive"
	"streamgate/candles"
	"streamgate/don"
	"streamgate/feedid"
	"streamgate/internal/testing/pgproc"
	"streamgate/internal/testing/pgtest"
	"streamgate/upstreamsim"
)

const network = "testnet"

// store is an archive store under test: its name and the store.
type store struct {
	name string
	s    interface {
		archive.Store
		archive.RollupStore
	}
}

// stores returns a fresh Pebble store and a fresh PostgreSQL database
// (the test process's server), each closed at the test's end.
func stores(t testing.TB) []store {
	t.Helper()
	p, err := archive.OpenPebble(archive.PebbleOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	pg := openPG(t)
	return []store{{"pebble", p}, {"postgres", pg}}
}

// shared is the package's PostgreSQL server, started at the first test
// that asks for it and removed by TestMain.
var shared struct {
	once sync.Once
	srv  *pgproc.Server
	err  error
	mu   sync.Mutex
	n    int
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bench.store != nil {
		bench.store.Close()
		os.RemoveAll(bench.dir)
	}
	if shared.srv != nil {
		shared.srv.Remove()
	}
	os.Exit(code)
}

// openPG opens a PostgreSQL store on a database of its own.
func openPG(t testing.TB) *archive.Postgres { return openPGAt(t, newDatabase(t)) }

// openPGAt opens a PostgreSQL store on the database at u (a replica).
func openPGAt(t testing.TB, u string) *archive.Postgres {
	t.Helper()
	p, err := archive.OpenPostgres(context.Background(), archive.PostgresOptions{URL: u, Password: pgtest.Password})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// parseQuery returns the getter of a query string.
func parseQuery(q string) (func(string) string, error) {
	v, err := url.ParseQuery(q)
	return v.Get, err
}

// newDatabase makes a database of the package's server, dropped at the
// test's end, and returns its URL.
func newDatabase(t testing.TB) string {
	t.Helper()
	if _, err := pgproc.Find(); err != nil {
		pgtest.New(t) // skips, or fails under CI=true
	}
	shared.once.Do(func() {
		bin, err := pgproc.Find()
		if err != nil {
			shared.err = err
			return
		}
		shared.srv, shared.err = pgproc.Start(bin)
	})
	require.NoError(t, shared.err)
	shared.mu.Lock()
	shared.n++
	name := fmt.Sprintf("candles_%d", shared.n)
	shared.mu.Unlock()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(shared.srv.URL())
	require.NoError(t, err)
	cfg.Password = pgtest.Password
	c, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(shared.srv.URL())
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// simStreams returns one simulator stream of each schema asked, by schema.
func simStreams(t testing.TB, sim *upstreamsim.Simulator, schemas ...string) map[string]feedid.ID {
	t.Helper()
	out := map[string]feedid.ID{}
	for _, s := range sim.Streams(upstreamsim.Testnet) {
		for _, want := range schemas {
			if s.SchemaVersion == want && out[want] == "" {
				id, err := feedid.Parse(s.FeedID)
				require.NoError(t, err)
				out[want] = id
			}
		}
	}
	require.Len(t, out, len(schemas), "the simulator has a stream of each schema")
	return out
}

// simReport is the simulator's report of stream at ts, as the archive
// keeps it.
func simReport(t testing.TB, sim *upstreamsim.Simulator, stream feedid.ID, ts int64) archive.Report {
	t.Helper()
	rec, ok := sim.Report(upstreamsim.Testnet, string(stream), ts)
	require.True(t, ok)
	r, err := archiveRecord(network, fmt.Appendf(nil, `{"feedID":"%s","validFromTimestamp":%d,"observationsTimestamp":%d,"fullReport":"%s"}`,
		rec.FeedID, rec.ValidFromTimestamp, rec.ObservationsTimestamp, rec.FullReport))
	require.NoError(t, err)
	return r
}

// realReports returns the real testnet reports of don/testdata.
func realReports(t testing.TB) []archive.Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "don", "testdata", "real-testnet-reports.json"))
	require.NoError(t, err)
	var f struct {
		Reports []struct {
			FeedID     string `json:"feedID"`
			FullReport string `json:"fullReport"`
		} `json:"reports"`
	}
	require.NoError(t, json.Unmarshal(b, &f))
	var out []archive.Report
	for _, r := range f.Reports {
		full, err := hex.DecodeString(strings.TrimPrefix(r.FullReport, "0x"))
		require.NoError(t, err)
		env, err := don.DecodeEnvelope(full)
		require.NoError(t, err)
		h, err := don.ReadHeader(env.ReportBlob)
		require.NoError(t, err)
		id, err := feedid.Parse(r.FeedID)
		require.NoError(t, err)
		out = append(out, archive.Report{Network: network, Stream: id, ValidFromTimestamp: uint32(h.ValidFromTimestamp),
			ObservationsTimestamp: uint32(h.ObservationsTimestamp), FullReport: full})
	}
	return out
}

// ohlc is a bar computed from raw reports, apart from the archive.
type ohlc struct {
	t          uint32
	o, h, l, c *big.Int
}

// rawBars computes the bars of field at resolution res (seconds) from
// reports (any order), each decoded by the decoded view's decoder, the
// bars whose open time is in [from, to].
func rawBars(t testing.TB, reports []archive.Report, field string, res, from, to uint32) []ohlc {
	t.Helper()
	type point struct {
		ts uint32
		v  *big.Int
	}
	var pts []point
	for _, r := range reports {
		fields, err := decodeOnce(r.FullReport)
		require.NoError(t, err)
		found := false
		for _, f := range fields {
			if f.Name == field {
				pts = append(pts, point{r.ObservationsTimestamp, f.Value.(*big.Int)})
				found = true
			}
		}
		require.True(t, found, "field %s in the report", field)
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].ts < pts[j].ts })
	var out []ohlc
	for _, p := range pts {
		open := p.ts - p.ts%res
		if open < from || open > to {
			continue
		}
		if len(out) == 0 || out[len(out)-1].t != open {
			out = append(out, ohlc{open, p.v, p.v, p.v, p.v})
			continue
		}
		b := &out[len(out)-1]
		b.c = p.v
		if p.v.Cmp(b.h) > 0 {
			b.h = p.v
		}
		if p.v.Cmp(b.l) < 0 {
			b.l = p.v
		}
	}
	return out
}

// decoded memoises the decoded view's decoding of a fullReport: the
// oracle reads each report once per field and resolution.
var decoded sync.Map // string(fullReport) → []don.Field

func decodeOnce(full []byte) ([]don.Field, error) {
	if f, ok := decoded.Load(string(full)); ok {
		return f.([]don.Field), nil
	}
	_, fields, err := don.DecodeFullReport("0x" + hex.EncodeToString(full))
	if err == nil {
		decoded.Store(string(full), fields)
	}
	return fields, err
}

// history is a /api/v1/history answer with exact values (precise=true).
type history struct {
	S        string   `json:"s"`
	T        []uint32 `json:"t"`
	O        []string `json:"o"`
	H        []string `json:"h"`
	L        []string `json:"l"`
	C        []string `json:"c"`
	V        []any    `json:"v"`
	NextTime *uint32  `json:"nextTime"`
	Missing  []struct {
		From uint32 `json:"from"`
		To   uint32 `json:"to"`
	} `json:"missing"`
}

// query answers rq from s at now, as the precise JSON history answer
// (its bytes and read back).
func query(t testing.TB, s candles.Source, rq candles.Request, now time.Time) ([]byte, history) {
	t.Helper()
	rq.Precise = true
	res, err := candles.Query(context.Background(), s, network, rq, now)
	require.NoError(t, err)
	body := candles.AppendHistory(nil, &res, true)
	var h history
	require.NoError(t, json.Unmarshal(body, &h), "%s", body)
	return body, h
}

func dec(v *big.Int) string { return string(don.AppendDecimal(nil, v, 18)) }

// request builds a request of stream at resolution name.
func request(t testing.TB, stream feedid.ID, res, field string, from, to uint32) candles.Request {
	t.Helper()
	q := url.Values{"resolution": {res}, "from": {fmt.Sprint(from)}, "to": {fmt.Sprint(to)}}
	if field != "" {
		q.Set("field", field)
	}
	rq, err := candles.ParseRequest(stream, q.Get)
	require.NoError(t, err)
	return rq
}

// archiveRecord is the archive's report of a record as the upstream sends
// it, read by the one record reader (don.ReadRecord).
func archiveRecord(network string, raw []byte) (archive.Report, error) {
	rec, err := don.ReadRecord(raw)
	if err != nil {
		return archive.Report{}, err
	}
	return archive.FromRecord(network, rec, raw)
}
