package config

func validateRateLimit(ck check, c *Config) Problems {
	v, r := ck.validator(), &c.RateLimit
	rd := &r.Redis
	switch {
	case r.Backend == BackendRedis:
		v.redisTarget(rd, &rd.URL, &rd.TLS, &rd.Sentinel, &rd.Cluster)
	case !r.Backend.valid():
		v.add(&r.Backend, "%q is not one of memory, redis", r.Backend)
	}
	if !rd.FailMode.valid() {
		v.add(&rd.FailMode, "%q is not one of open, closed", rd.FailMode)
	}
	v.secret(&rd.Password, &rd.PasswordFile, rd.file)
	return v.problems
}
