package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadArchive writes minimal plus block to a file in a directory of its
// own and loads it.
func loadArchive(t *testing.T, block string) (*Config, string, error) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "streamgate.yaml")
	require.NoError(t, os.WriteFile(path, []byte(minimal+block), 0o600))
	cfg, err := Load(path)
	return cfg, dir, err
}

func problemTexts(t *testing.T, err error) []string {
	t.Helper()
	var ps Problems
	require.True(t, errors.As(err, &ps), "%v", err)
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Error()
	}
	return out
}

// The archive is off by default, and its defaults are those documented.
func TestArchiveOffByDefault(t *testing.T) {
	cfg, _, err := loadArchive(t, "")
	require.NoError(t, err)
	assert.Equal(t, ArchiveBackendOff, cfg.Archive.Backend)
	assert.Equal(t, 720*time.Hour, cfg.Archive.Retention)
	assert.Equal(t, "", cfg.ArchivePath())
}

// A Pebble path is relative to the configuration file; an explicit
// retention of 0 (keep everything) is kept.
func TestArchivePebblePathRelativeToTheFile(t *testing.T) {
	cfg, dir, err := loadArchive(t, "archive:\n  backend: pebble\n  path: data/archive\n  retention: 0s\n")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "data", "archive"), cfg.ArchivePath())
	assert.Equal(t, time.Duration(0), cfg.Archive.Retention)

	abs := filepath.Join(t.TempDir(), "a")
	cfg, _, err = loadArchive(t, "archive:\n  backend: pebble\n  path: "+abs+"\n")
	require.NoError(t, err)
	assert.Equal(t, abs, cfg.ArchivePath())
}

// The password of a postgres archive is read from its file, and never
// shows in the configuration's text.
func TestArchivePostgresPasswordFile(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pw, []byte("s3cret\n"), 0o600))
	cfg, _, err := loadArchive(t, "archive:\n  backend: postgres\n  postgres:\n    url: postgres://streamgate@db:5432/streamgate?sslmode=disable\n    password_file: "+pw+"\n")
	require.NoError(t, err)
	assert.Equal(t, "s3cret", cfg.Archive.Postgres.Password.Reveal())
	assert.NotContains(t, cfg.Archive.Postgres.Password.String(), "s3cret")
}

// check names every problem of the block, each with its path and line,
// offline (no database is reached: db.invalid does not resolve), and
// never repeats a URL that holds a password.
func TestArchiveProblemsWithPathAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		want        []string
	}{
		{"unknown backend", "archive:\n  backend: sqlite\n",
			[]string{`archive.backend: "sqlite" is not one of pebble, postgres, or "" (off) (line 5)`}},
		{"pebble without a path", "archive:\n  backend: pebble\n",
			[]string{"archive.path: required when backend is pebble: the store's own directory (line 4)"}},
		{"pebble with a postgres url", "archive:\n  backend: pebble\n  path: a\n  postgres:\n    url: postgres://u@db.invalid/x\n",
			[]string{"archive.postgres.url: is for backend postgres; backend is pebble (line 8)"}},
		{"postgres without a url", "archive:\n  backend: postgres\n",
			[]string{"archive.postgres.url: required when backend is postgres (line 4)"}},
		{"postgres url with a password", "archive:\n  backend: postgres\n  postgres:\n    url: postgres://u:hunter2@db.invalid/x\n",
			[]string{"archive.postgres.url: must not contain a password: use password or password_file (line 7)"}},
		{"postgres url with a password parameter", "archive:\n  backend: postgres\n  postgres:\n    url: postgres://u@db.invalid/x?password=hunter2\n",
			[]string{"archive.postgres.url: must not contain a password: use password or password_file (line 7)"}},
		{"postgres url of another scheme", "archive:\n  backend: postgres\n  postgres:\n    url: mysql://u@db.invalid/x\n",
			[]string{"archive.postgres.url: must be a postgres:// or postgresql:// URL (line 7)"}},
		{"postgres with a path, every problem named", "archive:\n  backend: postgres\n  path: a\n  retention: -1h\n  read_timeout: 0s\n  queue: 0\n  postgres:\n    url: postgres://u@db.invalid/x\n    password: a\n    password_file: /f\n",
			[]string{
				"archive.path: is for backend pebble; backend is postgres (line 6)",
				"archive.retention: must not be negative (0 keeps everything) (line 7)",
				"archive.read_timeout: must be positive (line 8)",
				"archive.queue: must be positive (line 9)",
				"archive.postgres.password: give either password or password_file, not both (line 12)",
			}},
		{"password file missing", "archive:\n  backend: postgres\n  postgres:\n    url: postgres://u@db.invalid/x\n    password_file: /nonexistent/pw\n",
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := loadArchive(t, tc.block)
			require.Error(t, err)
			got := problemTexts(t, err)
			for _, g := range got {
				assert.NotContains(t, g, "hunter2")
			}
			if tc.want == nil {
				require.Len(t, got, 1)
				assert.True(t, strings.HasPrefix(got[0], "archive.postgres.password_file: "), got[0])
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// A change of the archive block is applied at a restart only.
func TestArchiveIsRestartOnly(t *testing.T) {
	a, _, err := loadArchive(t, "")
	require.NoError(t, err)
	b, _, err := loadArchive(t, "archive:\n  backend: pebble\n  path: x\n")
	require.NoError(t, err)
	assert.Equal(t, []string{"archive.backend", "archive.path"}, RestartOnly(a, b))
}
