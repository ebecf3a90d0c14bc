package archive

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func openPebble(t testing.TB, dir string, m *Metrics) *Pebble {
	t.Helper()
	p, err := OpenPebble(PebbleOptions{Dir: dir, Metrics: m})
	require.NoError(t, err)
	return p
}

func TestPebbleConformance(t *testing.T) {
	conformance(t, func(t *testing.T) Store {
		p := openPebble(t, filepath.Join(t.TempDir(), "archive"), nil)
		t.Cleanup(func() { p.Close() })
		return p
	})
}

// A store closed and opened again on its directory (a restart) keeps its
// reports, coverage and counts.
func TestPebbleReopen(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a", "b") // made if missing
	p := openPebble(t, dir, nil)
	_, err := p.Write(ctx, []Report{report(t, "testnet", 1, 100, 1), report(t, "mainnet", 1, 100, 2)})
	require.NoError(t, err)
	require.NoError(t, p.AddCoverage(ctx, "testnet", stream(1), Span{90, 110}))
	require.NoError(t, p.Close())

	p = openPebble(t, dir, nil)
	defer p.Close()
	r, ok, err := p.Get(ctx, "mainnet", stream(1), 100)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, report(t, "mainnet", 1, 100, 2), r)
	ok, err = Covered(ctx, p, "testnet", stream(1), 90, 110)
	require.NoError(t, err)
	assert.True(t, ok)
	res, err := p.Write(ctx, []Report{report(t, "testnet", 1, 100, 3)})
	require.NoError(t, err)
	assert.Equal(t, WriteResult{Duplicates: 1}, res, "what was stored before the restart still wins")
	st, err := p.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, Stats{Reports: 2, Spans: 1, BytesOnDisk: st.BytesOnDisk}, st)
}

// A second open of an open directory is refused, naming it: in this
// process, and from another process (this test's binary run again).
func TestPebbleDirectoryInUse(t *testing.T) {
	if dir := os.Getenv("ARCHIVE_TEST_OPEN_DIR"); dir != "" {
		_, err := OpenPebble(PebbleOptions{Dir: dir})
		require.Error(t, err)
		os.Stdout.WriteString("REFUSED: " + err.Error() + "\n")
		return
	}
	dir := filepath.Join(t.TempDir(), "archive")
	p := openPebble(t, dir, nil)
	_, err := OpenPebble(PebbleOptions{Dir: dir})
	require.ErrorIs(t, err, ErrInUse)
	assert.Contains(t, err.Error(), "archive directory "+dir+" is in use by another streamgate process")

	cmd := exec.Command(os.Args[0], "-test.run=^TestPebbleDirectoryInUse$", "-test.count=1")
	cmd.Env = append(os.Environ(), "ARCHIVE_TEST_OPEN_DIR="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "REFUSED: archive: archive directory "+dir+" is in use by another streamgate process", "another process")

	require.NoError(t, p.Close())
	p = openPebble(t, dir, nil) // free once closed
	require.NoError(t, p.Close())
}

// Reads are counted by result.
func TestPebbleReadMetrics(t *testing.T) {
	ctx := context.Background()
	m, err := NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	p := openPebble(t, t.TempDir(), m)
	defer p.Close()
	_, err = p.Write(ctx, []Report{report(t, "testnet", 1, 100, 1), report(t, "testnet", 1, 100, 1)})
	require.NoError(t, err)
	_, _, _ = p.Get(ctx, "testnet", stream(1), 100)
	_, _, _ = p.Get(ctx, "testnet", stream(1), 101)
	_, _ = p.At(ctx, "testnet", []ID{stream(1), stream(2)}, 100)
	assert.Equal(t, 2.0, testutil.ToFloat64(m.reads.WithLabelValues("hit")))
	assert.Equal(t, 2.0, testutil.ToFloat64(m.reads.WithLabelValues("miss")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.written))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.duplicates))
}
