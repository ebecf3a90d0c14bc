package config

import (
	"net/url"
	"path/filepath"
	"time"
)

// Archive is the durable archive of verified reports: every report a REST
// answer brought, once it passed verification under the rules in force,
// kept once per (network, stream, observationsTimestamp) in Pebble (one
// replica's directory) or PostgreSQL (shared by the replicas), and served
// from there after the memory cache and the shared tier, before the
// upstream. One archive holds every network, kept apart by network.
type Archive struct {
	// Backend is "" (off), pebble or postgres. Default "" (off).
	Backend ArchiveBackend `yaml:"backend" json:"backend"`
	// Path is the Pebble store's directory, made if missing, owned by one
	// process (a second gateway on it is refused at start). A relative
	// path is relative to the configuration file. Required with backend
	// pebble. Default "".
	Path string `yaml:"path" json:"path"`
	// Postgres is the PostgreSQL server of backend postgres.
	Postgres ArchivePostgres `yaml:"postgres" json:"postgres"`
	// Retention is how long a report is kept, by its
	// observationsTimestamp: older ones are never served from the archive
	// and are deleted (checked every minute). 0 keeps everything. Default
	// 720h.
	Retention time.Duration `yaml:"retention" json:"retention"`
	// ReadTimeout bounds one read of the archive on a request's way: a
	// store that is slower or down is passed by, and the request goes
	// upstream. Default 250ms.
	ReadTimeout time.Duration `yaml:"read_timeout" json:"read_timeout"`
	// Queue bounds the reports waiting to be written; what overflows is
	// dropped, counted and logged, and is a hole in its stream's coverage.
	// Default 65536.
	Queue int `yaml:"queue" json:"queue"`
}

// ArchivePostgres is the PostgreSQL server of archive.backend postgres.
type ArchivePostgres struct {
	// URL is postgres://user@host:port/database?sslmode=…, without a
	// password (one in it is refused: give password or password_file).
	// Required with backend postgres. Default "".
	URL string `yaml:"url" json:"url"`
	// Password is the user's password, if any. After loading it also
	// holds the contents of PasswordFile.
	Password Secret `yaml:"password" json:"password"`
	// PasswordFile is a file holding the password, read at load time.
	PasswordFile string `yaml:"password_file" json:"password_file"`

	file fileState
}

// ArchiveBackend is archive.backend, where the archive lives.
type ArchiveBackend string

// The values of archive.backend.
const (
	ArchiveBackendOff      ArchiveBackend = ""
	ArchiveBackendPebble   ArchiveBackend = "pebble"
	ArchiveBackendPostgres ArchiveBackend = "postgres"
)

func (b ArchiveBackend) valid() bool {
	return b == ArchiveBackendOff || b == ArchiveBackendPebble || b == ArchiveBackendPostgres
}

// The defaults of the archive block.
const (
	DefaultArchiveRetention   = 720 * time.Hour
	DefaultArchiveReadTimeout = 250 * time.Millisecond
	DefaultArchiveQueue       = 65536
)

func defaultArchive() Archive {
	return Archive{Backend: ArchiveBackendOff, Retention: DefaultArchiveRetention,
		ReadTimeout: DefaultArchiveReadTimeout, Queue: DefaultArchiveQueue}
}

// ArchivePath returns archive.path, a relative one joined to the
// directory of the configuration file (Load) or left relative to the
// working directory (Parse, or a Config built in code).
func (c *Config) ArchivePath() string {
	p := c.Archive.Path
	if p != "" && !filepath.IsAbs(p) && c.src != nil && c.src.baseDir != "" {
		p = filepath.Join(c.src.baseDir, p)
	}
	return p
}

// ServedRetention is the retention of what the archive serves:
// archive.retention when the archive is on, 0 (no bound) when it is off.
func (a Archive) ServedRetention() time.Duration {
	if a.Backend == ArchiveBackendOff {
		return 0
	}
	return a.Retention
}

// readFile reads archive.postgres.password_file, as
// readSecretFiles reads every secret file.
func (a *ArchivePostgres) readFile(read func(path string, st *fileState, dst *Secret)) {
	if a.PasswordFile != "" && a.Password == "" {
		read(a.PasswordFile, &a.file, &a.Password)
	}
}

func validateArchive(ck check, c *Config) Problems {
	v, a := ck.validator(), &c.Archive
	pg := &a.Postgres
	switch a.Backend {
	case ArchiveBackendPebble:
		if a.Path == "" {
			v.add(&a.Path, "required when backend is pebble: the store's own directory")
		}
		if pg.URL != "" {
			v.add(&pg.URL, "is for backend postgres; backend is pebble")
		}
	case ArchiveBackendPostgres:
		v.postgresURL(&pg.URL)
		if a.Path != "" {
			v.add(&a.Path, "is for backend pebble; backend is postgres")
		}
	case ArchiveBackendOff:
	default:
		v.add(&a.Backend, "%q is not one of pebble, postgres, or \"\" (off)", a.Backend)
	}
	if a.Retention < 0 {
		v.add(&a.Retention, "must not be negative (0 keeps everything)")
	}
	v.positive(&a.ReadTimeout)
	if a.Queue <= 0 {
		v.add(&a.Queue, "must be positive")
	}
	v.secret(&pg.Password, &pg.PasswordFile, pg.file)
	return v.problems
}

// postgresURL checks archive.postgres.url offline: a postgres:// or
// postgresql:// URL with a host and no password. Its text is never
// repeated: it may hold a password.
func (v *validator) postgresURL(field *string) {
	raw := *field
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		v.add(field, "required when backend is postgres")
	case err != nil:
		v.add(field, "not a URL")
	case u.Scheme != "postgres" && u.Scheme != "postgresql":
		v.add(field, "must be a postgres:// or postgresql:// URL")
	case u.Host == "":
		v.add(field, "has no host")
	default:
		if _, hasPassword := u.User.Password(); hasPassword || u.Query().Has("password") {
			v.add(field, "must not contain a password: use password or password_file")
		}
	}
}
