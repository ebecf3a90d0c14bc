package config

import "go.uber.org/zap/zapcore"

// The enumerated settings are typed strings, decoded from YAML as they are
// written. A value outside its constants is kept by the decoder and refused
// by Validate, so a *Config from Load or Parse only holds the constants
// below; their methods give consumers what they need without parsing the
// value again.

// LogLevel is log.level, the least severe level logged.
type LogLevel string

// The values of log.level.
const (
	LogLevelDebug LogLevel = "debug"
	LogLevelInfo  LogLevel = "info"
	LogLevelWarn  LogLevel = "warn"
	LogLevelError LogLevel = "error"
)

func (l LogLevel) valid() bool {
	switch l {
	case LogLevelDebug, LogLevelInfo, LogLevelWarn, LogLevelError:
		return true
	}
	return false
}

// ZapLevel returns the zap level of l. A level that Validate refuses gives
// the default level, zapcore.InfoLevel.
func (l LogLevel) ZapLevel() zapcore.Level {
	switch l {
	case LogLevelDebug:
		return zapcore.DebugLevel
	case LogLevelWarn:
		return zapcore.WarnLevel
	case LogLevelError:
		return zapcore.ErrorLevel
	}
	return zapcore.InfoLevel
}

// LogFormat is log.format, the encoding of log lines.
type LogFormat string

// The values of log.format.
const (
	// LogFormatJSON writes one JSON object per line.
	LogFormatJSON LogFormat = "json"
	// LogFormatConsole writes tab-separated lines for people to read.
	LogFormatConsole LogFormat = "console"
)

func (f LogFormat) valid() bool { return f == LogFormatJSON || f == LogFormatConsole }

// Encoder returns a zap encoder of format f with cfg: a console encoder for
// LogFormatConsole, else a JSON encoder.
func (f LogFormat) Encoder(cfg zapcore.EncoderConfig) zapcore.Encoder {
	if f == LogFormatConsole {
		return zapcore.NewConsoleEncoder(cfg)
	}
	return zapcore.NewJSONEncoder(cfg)
}

// Backend is ratelimit.backend, where the per-team limits are counted.
type Backend string

// The values of ratelimit.backend.
const (
	// BackendMemory counts in each replica's memory, alone.
	BackendMemory Backend = "memory"
	// BackendRedis counts in Redis, shared by the replicas
	// (ratelimit.redis).
	BackendRedis Backend = "redis"
)

func (b Backend) valid() bool { return b == BackendMemory || b == BackendRedis }

// SharedBackend is cache.shared.backend, where the shared cache tier lives.
type SharedBackend string

// The values of cache.shared.backend.
const (
	// SharedOff: each replica caches alone, in its own memory.
	SharedOff SharedBackend = "off"
	// SharedRedis: a second tier in Redis (cache.shared.url), shared by
	// the replicas.
	SharedRedis SharedBackend = "redis"
)

func (b SharedBackend) valid() bool { return b == SharedOff || b == SharedRedis }

// FailMode is ratelimit.redis.fail_mode, what the limits do while Redis is
// unreachable. The rate limiter has a fail mode type of its own; the
// program that builds it maps one onto the other.
type FailMode string

// The values of ratelimit.redis.fail_mode.
const (
	// FailModeOpen falls back to each replica's local limits.
	FailModeOpen FailMode = "open"
	// FailModeClosed refuses the requests that need Redis.
	FailModeClosed FailMode = "closed"
)

func (m FailMode) valid() bool { return m == FailModeOpen || m == FailModeClosed }
