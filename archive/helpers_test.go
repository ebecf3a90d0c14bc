package archive

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"streamgate/don"
	"streamgate/feedid"
	"streamgate/internal/testing/pgproc"
	"streamgate/internal/testing/pgtest"
)

// realRecord is one real testnet report of don/testdata: its stream, its
// fullReport as published, and the times its signed blob carries.
type realRecord struct {
	Name       string `json:"name"`
	FeedID     string `json:"feedID"`
	FullReport string `json:"fullReport"`
	validFrom  uint32
	obs        uint32
}

var realOnce = sync.OnceValues(func() ([]realRecord, error) {
	b, err := os.ReadFile(filepath.Join("..", "don", "testdata", "real-testnet-reports.json"))
	if err != nil {
		return nil, err
	}
	var f struct {
		Reports []realRecord `json:"reports"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	for i := range f.Reports {
		r := &f.Reports[i]
		full, err := hex.DecodeString(strings.TrimPrefix(r.FullReport, "0x"))
		if err != nil {
			return nil, err
		}
		env, err := don.DecodeEnvelope(full)
		if err != nil {
			return nil, err
		}
		h, err := don.ReadHeader(env.ReportBlob)
		if err != nil {
			return nil, err
		}
		r.validFrom, r.obs = uint32(h.ValidFromTimestamp), uint32(h.ObservationsTimestamp)
	}
	return f.Reports, nil
})

func realRecords(t testing.TB) []realRecord {
	t.Helper()
	rs, err := realOnce()
	require.NoError(t, err)
	require.Len(t, rs, 3)
	return rs
}

// realFull returns the first real testnet fullReport's bytes.
func realFull(t testing.TB) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.TrimPrefix(realRecords(t)[0].FullReport, "0x"))
	require.NoError(t, err)
	return b
}

// stream returns the i-th test stream ID (a V3 prefix).
func stream(i int) feedid.ID {
	var b [32]byte
	b[1] = 3
	binary.BigEndian.PutUint32(b[28:], uint32(i))
	return streamID(b[:])
}

// report returns a report of stream i at ts whose fullReport is a real
// one with its last byte set to mark (so that two reports at one key can
// be told apart).
func report(t testing.TB, network string, i int, ts uint32, mark byte) Report {
	full := append([]byte(nil), realFull(t)...)
	full[len(full)-1] = mark
	return Report{Network: network, Stream: stream(i), ValidFromTimestamp: ts - 1, ObservationsTimestamp: ts, FullReport: full}
}

// pgServer is a PostgreSQL server whose tests each get a database of
// their own.
type pgServer struct {
	srv *pgproc.Server
	mu  sync.Mutex
	n   int
}

// shared is the package's PostgreSQL server, started at the first test
// that asks for it (one initdb for every test and every -count) and
// removed by TestMain.
var shared struct {
	once sync.Once
	pg   *pgServer
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.pg != nil {
		shared.pg.srv.Remove()
	}
	os.Exit(code)
}

// newPG returns the package's server, started by this process. A test
// that stops the server starts one of its own instead (ownPG).
func newPG(t testing.TB) *pgServer {
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
		srv, err := pgproc.Start(bin)
		shared.pg, shared.err = &pgServer{srv: srv}, err
	})
	require.NoError(t, shared.err)
	return shared.pg
}

// ownPG starts a server for t alone, stopped and removed at its end.
func ownPG(t testing.TB) (*pgServer, *pgtest.Server) {
	s := pgtest.New(t)
	return &pgServer{srv: s.Server}, s
}

// database makes a fresh database and returns its URL.
func (s *pgServer) database(t testing.TB) string {
	t.Helper()
	s.mu.Lock()
	s.n++
	name := fmt.Sprintf("archive_%d", s.n)
	s.mu.Unlock()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(s.srv.URL())
	require.NoError(t, err)
	cfg.Password = pgtest.Password
	c, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer c.Close(ctx)
	_, err = c.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() { // after the stores' pools close (cleanups run last first)
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(s.srv.URL())
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

func openPG(t testing.TB, u string, m *Metrics) *Postgres {
	t.Helper()
	p, err := OpenPostgres(context.Background(), PostgresOptions{URL: u, Password: pgtest.Password, Metrics: m})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func feedIDOf(t testing.TB, s string) feedid.ID {
	id, err := feedid.Parse(s)
	require.NoError(t, err)
	return id
}
