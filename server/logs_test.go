package server

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"streamgate/config"
)

// newTimeEncoder writes what zapcore.ISO8601TimeEncoder writes, for
// times within one millisecond, across milliseconds, seconds and zones,
// and before the Unix epoch.
func TestTimeEncoder(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		paris = time.FixedZone("CET", 3600)
	}
	base := time.Date(2026, 3, 29, 0, 59, 59, 998_000_000, time.UTC) // Paris changes to summer time at 01:00 UTC
	var times []time.Time
	for i := range 40 {
		u := base.Add(time.Duration(i) * 250 * time.Microsecond)
		times = append(times, u, u.In(paris), u.In(time.FixedZone("x", -(5*3600+30*60))), u.Local())
	}
	times = append(times, time.Unix(-1, 999_000_000).UTC(), time.Unix(0, 0).UTC(), time.Now())
	encode := func(enc zapcore.TimeEncoder, ts time.Time) string {
		cfg := zap.NewProductionEncoderConfig()
		cfg.EncodeTime = enc
		buf, err := zapcore.NewJSONEncoder(cfg).EncodeEntry(zapcore.Entry{Time: ts, Message: "m"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	own := newTimeEncoder()
	for _, ts := range times {
		assert.Equal(t, encode(zapcore.ISO8601TimeEncoder, ts), encode(own, ts), ts.String())
	}
}

// NewLoggers writes the process log at once and the access log when
// stopped, both at c's level, in c's format, with ISO 8601 times.
func TestNewLoggers(t *testing.T) {
	var out bytes.Buffer
	log, access, stop := NewLoggers(config.Log{Level: config.LogLevelWarn, Format: config.LogFormatJSON}, &out)
	log.Info("dropped")
	log.Warn("process line")
	assert.Contains(t, out.String(), `"msg":"process line"`)
	access.Warn("access line")
	assert.NotContains(t, out.String(), "access line", "the access log is buffered")
	stop()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, out.String())
	for _, l := range lines {
		var e struct{ TS, Level, Msg string }
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		assert.Equal(t, "warn", e.Level)
		_, err := time.Parse("2006-01-02T15:04:05.000Z0700", e.TS)
		assert.NoError(t, err, e.TS)
	}
	assert.NotContains(t, out.String(), "dropped")

	out.Reset()
	NewLogger(config.Log{Level: config.LogLevelDebug, Format: config.LogFormatConsole}, zapcore.AddSync(&out)).Debug("console line")
	assert.Regexp(t, `^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\S*\tdebug\tconsole line\n$`, out.String())
}
