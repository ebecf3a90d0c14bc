package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// fileState remembers the reading of a secret file, for Validate to
// report. The secret itself is kept in the exported Secret field that the
// file stands for, never here: fmt prints unexported fields without calling
// Secret's methods.
type fileState struct {
	read bool
	err  error
}

// readSecretFiles reads every secret file that is the only source of its
// secret (secret_file, api_secret_file, password_file) into the Secret
// field it stands for, trailing line breaks removed, and records the
// outcome in the field's fileState. A relative path is relative to the
// directory of the configuration file (Load) or the working directory
// (Parse). A file given together with an inline secret is not read: Validate
// refuses the pair. A file already read is not read again.
//
// Parse calls it after filling the defaults and before validating; it is
// the only place the configuration reads files, so that Validate has no
// side effects.
func (c *Config) readSecretFiles() {
	baseDir := ""
	if c.src != nil {
		baseDir = c.src.baseDir
	}
	read := func(path string, st *fileState, dst *Secret) {
		if st.read {
			return
		}
		if !filepath.IsAbs(path) && baseDir != "" {
			path = filepath.Join(baseDir, path)
		}
		data, err := os.ReadFile(path)
		st.read, st.err = true, err
		if err == nil {
			*dst = Secret(strings.TrimRight(string(data), "\r\n"))
		}
	}
	credentials := func(cr *Credentials) {
		if cr != nil && cr.APISecretFile != "" && cr.APISecret == "" {
			read(cr.APISecretFile, &cr.file, &cr.APISecret)
		}
	}

	for _, n := range c.Networks {
		if n != nil {
			credentials(&n.Upstream.Credentials)
			if v := &n.Verify; v.DONsFile != "" && !v.file.read {
				path := v.DONsFile
				if !filepath.IsAbs(path) && baseDir != "" {
					path = filepath.Join(baseDir, path)
				}
				data, err := os.ReadFile(path)
				if err == nil {
					dec := yaml.NewDecoder(bytes.NewReader(data))
					dec.KnownFields(true)
					if err = dec.Decode(&v.fileDONs); err != nil {
						v.fileDONs = nil
					}
				}
				v.file.read, v.file.err = true, err
			}
		}
	}
	if s := &c.Server; s.AdminTokenFile != "" && s.AdminToken == "" {
		read(s.AdminTokenFile, &s.file, &s.AdminToken)
	}
	if r := &c.RateLimit.Redis; r.PasswordFile != "" && r.Password == "" {
		read(r.PasswordFile, &r.file, &r.Password)
	}
	if r := &c.Cache.Shared; r.PasswordFile != "" && r.Password == "" {
		read(r.PasswordFile, &r.file, &r.Password)
	}
	c.Archive.Postgres.readFile(read)
	for _, s := range []*RedisSentinel{c.RateLimit.Redis.Sentinel, c.Cache.Shared.Sentinel} {
		if s != nil && s.SentinelPasswordFile != "" && s.SentinelPassword == "" {
			read(s.SentinelPasswordFile, &s.file, &s.SentinelPassword)
		}
	}
	for i := range c.Teams {
		t := &c.Teams[i]
		for _, cr := range t.Upstream {
			credentials(cr)
		}
		for j := range t.Keys {
			if k := &t.Keys[j]; k.SecretFile != "" && k.Secret == "" && k.SecretList == nil {
				read(k.SecretFile, &k.file, &k.Secret)
			}
		}
	}
}
