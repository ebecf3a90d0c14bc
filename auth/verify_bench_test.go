package auth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"streamgate/auth"
)

// The benchmarks of verification as the gateway does it: Verifier.Verify
// against a KeyStore of realistic size, serially and from parallel
// goroutines, with and without replay protection. BenchmarkVerify and
// BenchmarkVerifyWithStore (package auth) measure the signature check
// alone and one key in the store.

const (
	benchFeed   = "0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"
	benchTarget = "/api/v1/reports/latest?feedID=" + benchFeed
)

// benchStore holds 20 teams of 5 keys each; key "key-7-3" has secret
// "secret-7-3-0123456789".
func benchStore(b *testing.B) *auth.KeyStore {
	b.Helper()
	var teams []auth.Team
	for t := range 20 {
		team := auth.Team{Name: "team-" + strconv.Itoa(t), Networks: []string{"mainnet"}, All: true}
		for k := range 5 {
			id := "key-" + strconv.Itoa(t) + "-" + strconv.Itoa(k)
			team.Keys = append(team.Keys, auth.Key{ID: id, Secrets: []string{"secret-" + strconv.Itoa(t) + "-" + strconv.Itoa(k) + "-0123456789"}})
		}
		teams = append(teams, team)
	}
	ks, err := auth.NewKeyStore(teams)
	if err != nil {
		b.Fatal(err)
	}
	return ks
}

func benchSigned(target, key, secret string, at time.Time) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	auth.Sign(r, key, []byte(secret), at)
	return r
}

// BenchmarkVerifierVerify verifies one signed request again and again, with
// replay protection off (it would refuse the second use).
func BenchmarkVerifierVerify(b *testing.B) {
	ks := benchStore(b)
	v := auth.NewVerifier(auth.VerifierConfig{MaxSkew: time.Hour})
	b.Run("serial", func(b *testing.B) {
		r := benchSigned(benchTarget, "key-7-3", "secret-7-3-0123456789", time.Now())
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(ks, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := benchSigned(benchTarget, "key-7-3", "secret-7-3-0123456789", time.Now())
			for pb.Next() {
				if _, err := v.Verify(ks, r); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("bad-signature", func(b *testing.B) {
		r := benchSigned(benchTarget, "key-7-3", "not-the-secret-0123456789", time.Now())
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Verify(ks, r); err == nil {
				b.Fatal("verified a bad signature")
			}
		}
	})
}

// BenchmarkVerifierVerifyReplay verifies distinct signatures with replay
// protection on, so that each is remembered: the cost of the replay cache
// on top of BenchmarkVerifierVerify/serial. Requests are signed in batches
// of 1024, outside the timer, on a clock that moves on 1.1 s per batch, so
// the cache rotates as it does under about 1000 requests per second.
func BenchmarkVerifierVerifyReplay(b *testing.B) {
	ks := benchStore(b)
	clock := time.UnixMilli(1_750_000_000_000)
	v := auth.NewVerifier(auth.VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Now: func() time.Time { return clock }})
	const batch = 1024
	reqs := make([]*http.Request, batch)
	sign := func() {
		clock = clock.Add(1100 * time.Millisecond)
		for i := range reqs {
			reqs[i] = benchSigned(benchTarget, "key-7-3", "secret-7-3-0123456789", clock.Add(-time.Duration(i)*time.Millisecond))
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%batch == 0 {
			b.StopTimer()
			sign()
			b.StartTimer()
		}
		if _, err := v.Verify(ks, reqs[i%batch]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifierCheckRecord is BenchmarkVerifierVerifyReplay split as
// the gateway does it, with replay protection on: "check+record" checks
// and records distinct signatures (an admitted request), "check" only
// checks them (a request then refused by a rate limit: nothing is
// recorded), and "replay" checks a signature already recorded (refused
// when the record is peeked).
func BenchmarkVerifierCheckRecord(b *testing.B) {
	ks := benchStore(b)
	clock := time.UnixMilli(1_750_000_000_000)
	const batch = 1024
	reqs := make([]*http.Request, batch)
	sign := func() {
		clock = clock.Add(1100 * time.Millisecond)
		for i := range reqs {
			reqs[i] = benchSigned(benchTarget, "key-7-3", "secret-7-3-0123456789", clock.Add(-time.Duration(i)*time.Millisecond))
		}
	}
	run := func(b *testing.B, record bool) {
		v := auth.NewVerifier(auth.VerifierConfig{MaxSkew: 5 * time.Second, ReplayProtection: true, Now: func() time.Time { return clock }})
		ctx := b.Context()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if i%batch == 0 {
				b.StopTimer()
				sign()
				b.StartTimer()
			}
			res, err := v.Check(ks, reqs[i%batch])
			if err != nil {
				b.Fatal(err)
			}
			if record {
				if err := v.Record(ctx, res); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(v.Stats().Entries), "entries")
	}
	b.Run("check+record", func(b *testing.B) { run(b, true) })
	b.Run("check", func(b *testing.B) { run(b, false) })
	b.Run("replay", func(b *testing.B) {
		v := auth.NewVerifier(auth.VerifierConfig{MaxSkew: time.Hour, ReplayProtection: true})
		r := benchSigned(benchTarget, "key-7-3", "secret-7-3-0123456789", time.Now())
		if _, err := v.Verify(ks, r); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Check(ks, r); !errors.Is(err, auth.ErrReplay) {
				b.Fatal(err)
			}
		}
	})
}
