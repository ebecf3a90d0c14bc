package config

func validateServer(ck check, c *Config) Problems {
	v, s := ck.validator(), &c.Server
	if s.AdminListen != "" {
		v.listen(&s.AdminListen)
		for _, name := range sortedKeys(c.Networks) {
			if n := c.Networks[name]; n != nil && n.Listen == s.AdminListen && !anyPort(s.AdminListen) {
				v.add(&s.AdminListen, "%q is also the listen address of %s", s.AdminListen, v.at.of(n))
			}
		}
	}
	switch {
	case s.Pprof && s.AdminListen == "":
		v.add(&s.Pprof, "needs %s, which serves it", v.at.of(&s.AdminListen))
	case s.Pprof && s.AdminToken == "" && s.AdminTokenFile == "" && !loopbackAddr(s.AdminListen):
		v.add(&s.Pprof, "%s %q is not on loopback: set %s (or admin_token_file) to serve the profiles",
			v.at.of(&s.AdminListen), s.AdminListen, v.at.of(&s.AdminToken))
	}
	v.secret(&s.AdminToken, &s.AdminTokenFile, s.file)
	if s.AdminTLS != nil {
		if s.AdminListen == "" {
			v.add(s.AdminTLS, "needs %s, which it serves", v.at.of(&s.AdminListen))
		}
		v.tls(s.AdminTLS)
	}
	v.positive(&s.ShutdownTimeout)
	v.positive(&s.ReadHeaderTimeout)
	v.positive(&s.IdleTimeout)
	v.positive(&s.ReadTimeout)
	v.positive(&s.WriteTimeout)
	return v.problems
}

func validateLog(ck check, c *Config) Problems {
	v, l := ck.validator(), &c.Log
	if !l.Level.valid() {
		v.add(&l.Level, "%q is not one of debug, info, warn, error", l.Level)
	}
	if !l.Format.valid() {
		v.add(&l.Format, "%q is not one of json, console", l.Format)
	}
	return v.problems
}
