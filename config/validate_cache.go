package config

func validateCache(ck check, c *Config) Problems {
	v, ca := ck.validator(), &c.Cache
	if ca.MaxBytes <= 0 {
		v.add(&ca.MaxBytes, "must be positive")
	}
	v.positive(&ca.CatalogTTL)
	v.positive(&ca.LatestTTL)
	if ca.LatestMaxStale < 0 {
		v.add(&ca.LatestMaxStale, "must not be negative")
	}
	v.positive(&ca.LatestMaxWait)
	v.positive(&ca.NegativeTTL)

	sh := &ca.Shared
	switch {
	case sh.Backend == SharedRedis:
		v.redisTarget(sh, &sh.URL, &sh.TLS, &sh.Sentinel, &sh.Cluster)
	case !sh.Backend.valid():
		v.add(&sh.Backend, "%q is not one of off, redis", sh.Backend)
	}
	v.positive(&sh.TTL)
	if sh.MaxEntryBytes <= 0 {
		v.add(&sh.MaxEntryBytes, "must be positive")
	}
	v.positive(&sh.Lease)
	v.secret(&sh.Password, &sh.PasswordFile, sh.file)
	return v.problems
}
