package config

import (
	"slices"
	"time"
)

// MaxClientOrigins bounds realtime.client_origins.
const MaxClientOrigins = 8

func validateRealtime(ck check, c *Config) Problems {
	v, r := ck.validator(), &c.Realtime
	if r.ClientQueue < 1 {
		v.add(&r.ClientQueue, "must be at least 1")
	}
	v.positive(&r.PingInterval)
	if r.TeamConnections < 1 {
		v.add(&r.TeamConnections, "must be at least 1")
	}
	v.positive(&r.Grace)
	if r.ResumeRecordsPerTeam < 1 {
		v.add(&r.ResumeRecordsPerTeam, "must be at least 1")
	}
	if r.ResumeRecords < r.ResumeRecordsPerTeam {
		v.add(&r.ResumeRecords, "must be at least %s (%d)", v.at.of(&r.ResumeRecordsPerTeam), r.ResumeRecordsPerTeam)
	}
	if r.ShareLease < 300*time.Millisecond {
		v.add(&r.ShareLease, "must be at least 300ms (its holder renews a lease every third of it)")
	}
	if len(r.ClientOrigins) > MaxClientOrigins {
		v.add(&r.ClientOrigins, "must list at most %d origins", MaxClientOrigins)
	}
	for i, o := range r.ClientOrigins {
		if !validOriginName(o) {
			v.add(&r.ClientOrigins[i], "must be 1 to 32 letters, digits, \"_\" or \"-\"")
		} else if slices.Contains(r.ClientOrigins[:i], o) {
			v.add(&r.ClientOrigins[i], "duplicates %q", o)
		}
	}
	for _, x := range []struct {
		d   *time.Duration
		max time.Duration
	}{
		{&r.DrainDelay, 10 * time.Minute},
		{&r.ResumeWindow, time.Hour},
		{&r.BackfillMax, time.Hour},
		{&r.SinceMax, 24 * time.Hour},
	} {
		if *x.d < 0 || *x.d > x.max {
			v.add(x.d, "must be from 0s to %s", x.max)
		}
	}
	return v.problems
}

// validOriginName reports whether o may be advertised as an HA origin: the
// SDKs split the header on "," and strip braces, and Go does not trim
// spaces, so names are kept to a plain alphabet.
func validOriginName(o string) bool {
	if len(o) == 0 || len(o) > 32 {
		return false
	}
	for _, c := range o {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
