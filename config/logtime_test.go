package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ISO8601TimeEncoder writes what zapcore.ISO8601TimeEncoder writes, for
// times within one millisecond, across milliseconds, seconds and zones,
// and before the Unix epoch.
func TestISO8601TimeEncoder(t *testing.T) {
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
	for _, ts := range times {
		assert.Equal(t, encode(zapcore.ISO8601TimeEncoder, ts), encode(ISO8601TimeEncoder, ts), ts.String())
	}
}
