// Package config is streamgate's configuration: the YAML schema as typed
// structs, the defaults of every omitted key, ${VAR} expansion from the
// environment, and a validation that reports every problem at once.
//
// A configuration is read with Load or Parse, or taken from Default, the
// demo configuration. Both Load and Parse fill defaults, read secret files
// and validate, so a *Config they return is complete and valid; Validate
// itself only checks. RestartOnly tells which changed settings a reload
// cannot apply. The key names are a contract with the files operators
// write: config.example.yaml at the repository root documents each one with
// its default, and ARCHITECTURE.md describes how the gateway uses them.
//
// Secrets are of type Secret, which prints, logs and marshals as REDACTED.
// Logging a whole Config, Team or Key therefore never leaks a secret.
//
// A Config is not modified after Load or Parse return and is then safe for
// concurrent reads.
package config

import (
	"sort"
	"time"
)

// Config is the whole configuration.
type Config struct {
	Server    Server              `yaml:"server" json:"server"`
	Log       Log                 `yaml:"log" json:"log"`
	Networks  map[string]*Network `yaml:"networks" json:"networks"`
	Auth      Auth                `yaml:"auth" json:"auth"`
	Cache     Cache               `yaml:"cache" json:"cache"`
	RateLimit RateLimit           `yaml:"ratelimit" json:"ratelimit"`
	Realtime  Realtime            `yaml:"realtime" json:"realtime"`
	Tracing   Tracing             `yaml:"tracing" json:"tracing"`
	Archive   Archive             `yaml:"archive" json:"archive"`
	// Sharing is organisation (today's sharing: a team without a
	// credential of its own uses its network's, and the stream is shared
	// under the network's credential) or credential (the stream too is
	// partitioned by upstream credential: what is streamed under one
	// credential reaches only the teams that use it; see Partitions).
	// Default "organisation". A change needs a restart, and so, with
	// credential, does a change of the teams' upstream credentials.
	Sharing Sharing `yaml:"sharing" json:"sharing"`
	Teams   []Team  `yaml:"teams" json:"teams"`

	// src describes where the configuration came from; nil for a Config
	// built in code.
	src *source
}

// Server holds the process-wide HTTP settings.
type Server struct {
	// AdminListen is the host:port of the admin listener that serves
	// /metrics, /healthz and /readyz. Default "127.0.0.1:9090". An explicit
	// empty string ("") disables the admin listener.
	AdminListen string `yaml:"admin_listen" json:"admin_listen"`
	// ShutdownTimeout bounds the drain after SIGTERM. Default 15s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout" json:"shutdown_timeout"`
	// ReadHeaderTimeout is http.Server.ReadHeaderTimeout of every listener.
	// Default 10s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" json:"read_header_timeout"`
	// IdleTimeout is http.Server.IdleTimeout of every listener. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout" json:"idle_timeout"`
	// ReadTimeout is http.Server.ReadTimeout of every listener: the whole
	// request, headers and any body, must arrive within it. Default 30s.
	ReadTimeout time.Duration `yaml:"read_timeout" json:"read_timeout"`
	// WriteTimeout is http.Server.WriteTimeout of every listener: the
	// answer must be written within it from the end of the request's
	// headers, including the upstream call. It must exceed the longest
	// upstream call with its retries. Default 60s. A WebSocket connection
	// is not bound by either timeout once upgraded.
	WriteTimeout time.Duration `yaml:"write_timeout" json:"write_timeout"`
	// AdminToken, when set, is required as "Authorization: Bearer TOKEN"
	// by the admin listener's status page (/) and /status.json, which then
	// answer 401 without it; /metrics, /healthz and /readyz stay open.
	// After loading it also holds the contents of AdminTokenFile. Default
	// "" (no token: keep the admin listener on loopback).
	AdminToken Secret `yaml:"admin_token" json:"admin_token"`
	// AdminTokenFile is a file holding the token, read at load time like
	// Credentials.APISecretFile. Default "".
	AdminTokenFile string `yaml:"admin_token_file" json:"admin_token_file"`
	// Pprof, when true, serves the Go runtime's profiles (net/http/pprof)
	// on the admin listener under /debug/pprof/, behind AdminToken when
	// one is set. It needs AdminListen, and AdminToken when AdminListen is
	// not on loopback. A profile costs CPU while it is taken; nothing is
	// spent while none is asked for. Default false.
	Pprof bool `yaml:"pprof" json:"pprof"`
	// AdminTLS, when set, serves the admin listener over TLS (see TLS).
	// Default none (plain HTTP: keep the admin listener on loopback or a
	// private network).
	AdminTLS *TLS `yaml:"admin_tls" json:"admin_tls"`

	file fileState
}

// Log configures the process logger.
type Log struct {
	// Level is one of debug, info, warn, error. Default "info".
	Level LogLevel `yaml:"level" json:"level"`
	// Format is json or console. Default "json".
	Format LogFormat `yaml:"format" json:"format"`
	// Audit, when true, logs one line per report read: team, key, network
	// and streams. Default false.
	Audit bool `yaml:"audit" json:"audit"`
}

// Shared reports whether the replicas share the upstream WebSocket
// connections: realtime.share with the redis backend.
func (c *Config) Shared() bool {
	return c.Realtime.Share && c.RateLimit.Backend == BackendRedis
}

// Network returns the network named name, or nil.
func (c *Config) Network(name string) *Network { return c.Networks[name] }

// NetworkNames returns the names of the configured networks, sorted.
func (c *Config) NetworkNames() []string {
	names := make([]string, 0, len(c.Networks))
	for name := range c.Networks {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Team returns the team named name, or nil.
func (c *Config) Team(name string) *Team {
	for i := range c.Teams {
		if c.Teams[i].Name == name {
			return &c.Teams[i]
		}
	}
	return nil
}
