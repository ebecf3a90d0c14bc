package config

func validateAuth(ck check, c *Config) Problems {
	v, a := ck.validator(), &c.Auth
	if a.MaxSkew <= 0 {
		v.add(&a.MaxSkew, "must be positive")
	}
	if a.ReplayGrace < 0 || (a.MaxSkew > 0 && a.ReplayGrace > a.MaxSkew) {
		v.add(&a.ReplayGrace, "must be between 0 and %s", v.at.of(&a.MaxSkew))
	}
	v.rate(&a.AnonymousRate, false)
	if a.ReplayMaxEntries < 1000 {
		v.add(&a.ReplayMaxEntries, "must be at least 1000")
	}
	return v.problems
}
