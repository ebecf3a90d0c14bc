package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
)

func TestEnumsDecode(t *testing.T) {
	cfg, err := Parse([]byte(minimal+`log: {level: warn, format: console}
ratelimit:
  backend: redis
  redis: {fail_mode: closed}
`), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, LogLevelWarn, cfg.Log.Level)
	assert.Equal(t, LogFormatConsole, cfg.Log.Format)
	assert.Equal(t, BackendRedis, cfg.RateLimit.Backend)
	assert.Equal(t, FailModeClosed, cfg.RateLimit.Redis.FailMode)

	cfg, err = Parse([]byte(minimal), fakeEnv(nil))
	require.NoError(t, err)
	assert.Equal(t, LogLevelInfo, cfg.Log.Level)
	assert.Equal(t, LogFormatJSON, cfg.Log.Format)
	assert.Equal(t, BackendMemory, cfg.RateLimit.Backend)
	assert.Equal(t, FailModeOpen, cfg.RateLimit.Redis.FailMode)
}

func TestEnumsUnknownValues(t *testing.T) {
	_, err := Parse([]byte(minimal+`log: {level: loud, format: xml}
ratelimit:
  backend: etcd
  redis: {fail_mode: ajar}
`), fakeEnv(nil))
	var ps Problems
	require.ErrorAs(t, err, &ps)
	assert.Equal(t, Problems{
		{Path: "log.level", Line: 4, Msg: `"loud" is not one of debug, info, warn, error`},
		{Path: "log.format", Line: 4, Msg: `"xml" is not one of json, console`},
		{Path: "ratelimit.backend", Line: 6, Msg: `"etcd" is not one of memory, redis`},
		{Path: "ratelimit.redis.fail_mode", Line: 7, Msg: `"ajar" is not one of open, closed`},
	}, ps)

	// The values are case-sensitive, as they were as plain strings.
	_, err = Parse([]byte(minimal+"log: {level: INFO}\n"), fakeEnv(nil))
	assert.EqualError(t, err, `log.level: "INFO" is not one of debug, info, warn, error (line 4)`)
}

func TestLogLevelZapLevel(t *testing.T) {
	for level, want := range map[LogLevel]zapcore.Level{
		LogLevelDebug: zapcore.DebugLevel,
		LogLevelInfo:  zapcore.InfoLevel,
		LogLevelWarn:  zapcore.WarnLevel,
		LogLevelError: zapcore.ErrorLevel,
		"loud":        zapcore.InfoLevel, // refused by Validate
	} {
		assert.Equal(t, want, level.ZapLevel(), level)
		if level.valid() {
			// The names are zap's own.
			parsed, err := zapcore.ParseLevel(string(level))
			require.NoError(t, err)
			assert.Equal(t, parsed, level.ZapLevel())
		}
	}
}

func TestLogFormatEncoder(t *testing.T) {
	encCfg := zapcore.EncoderConfig{MessageKey: "msg"}
	line := func(f LogFormat) string {
		buf, err := f.Encoder(encCfg).EncodeEntry(zapcore.Entry{Message: "hello"}, nil)
		require.NoError(t, err)
		return buf.String()
	}
	assert.Equal(t, `{"msg":"hello"}`+"\n", line(LogFormatJSON))
	assert.Equal(t, "hello\n", line(LogFormatConsole))
}
