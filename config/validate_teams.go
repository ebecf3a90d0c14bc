package config

import (
	"net"
	"net/url"
	"regexp"

	"streamgate/auth"
)

var teamNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// teamsCheck is the validator of the teams section with the checks only
// a team's settings need: its feeds and its keys' secrets and certificates.
type teamsCheck struct{ *validator }

func validateTeams(ck check, c *Config) Problems {
	v, teams, networks := teamsCheck{ck.validator()}, c.Teams, c.Networks
	teamAt := map[string]int{}
	keyAt := map[string]string{}
	for i := range teams {
		t := &teams[i]
		switch prev, dup := teamAt[t.Name]; {
		case t.Name == "":
			v.add(&t.Name, "required")
		case !teamNameRE.MatchString(t.Name):
			v.add(&t.Name, "must be 1 to 64 of letters, digits, '.', '_' and '-', starting with a letter or digit")
		case dup:
			v.add(&t.Name, "%q is also the name of %s", t.Name, v.at.of(&teams[prev]))
		default:
			teamAt[t.Name] = i
		}

		if len(t.Networks) == 0 {
			v.add(&t.Networks, "required: the networks the team may call")
		}
		for j, name := range t.Networks {
			if _, ok := networks[name]; !ok {
				v.add(&t.Networks[j], "no network named %q", name)
			}
		}
		v.feeds(&t.Feeds)
		v.rate(&t.Rate, false)
		if t.DailyQuota < 0 {
			v.add(&t.DailyQuota, "must not be negative (0 is unlimited)")
		}
		for _, name := range sortedKeys(t.Upstream) {
			up := joinKey(v.at.of(&t.Upstream), name)
			if !t.HasNetwork(name) {
				v.addAt(up, "the team does not use network %q", name)
			}
			cr := t.Upstream[name]
			if cr == nil { // only in a Config built in code
				cr = &Credentials{}
				v.adopt(cr, up)
			}
			v.credentials(cr, true)
		}

		if len(t.Keys) == 0 {
			v.add(&t.Keys, "required: at least one key")
		}
		for j := range t.Keys {
			k := &t.Keys[j]
			switch prev, dup := keyAt[k.ID]; {
			case k.ID == "":
				v.add(&k.ID, "required")
			case !keyIDRE.MatchString(k.ID):
				v.add(&k.ID, "must be 1 to 128 printable ASCII characters without spaces")
			case dup:
				v.add(&k.ID, "%q is also the id of %s", k.ID, prev)
			default:
				keyAt[k.ID] = v.at.of(k)
			}
			v.keySecrets(k)
			v.clientCert(t, k, networks)
			v.rate(&k.Rate, false)
			v.demoSecret(t, k, networks)
		}
	}
	return v.problems
}

func (v teamsCheck) feeds(field *StreamIDs) {
	feeds := *field
	if len(feeds) == 0 {
		v.add(field, `required: ["*"] or a list of stream IDs`)
		return
	}
	for i, f := range feeds {
		switch {
		case f == AllFeedsWildcard && len(feeds) > 1:
			v.add(&feeds[i], `"*" must be the only entry`)
		case f == AllFeedsWildcard:
		default:
			v.streamID(&feeds[i])
		}
	}
}

// keySecrets checks that exactly one of secret, secrets and secret_file is
// given, that the file was read, and every secret's length.
func (v teamsCheck) keySecrets(k *Key) {
	inline := k.Secret != "" && !k.file.read
	given := 0
	for _, set := range []bool{inline, k.SecretList != nil, k.SecretFile != ""} {
		if set {
			given++
		}
	}
	switch {
	case given == 0:
		v.add(&k.Secret, "required (or secrets, or secret_file)")
	case given > 1:
		v.add(&k.Secret, "give exactly one of secret, secrets, secret_file")
	case inline:
		v.secretLen(&k.Secret, k.Secret)
	case k.SecretList != nil:
		if len(k.SecretList) == 0 {
			v.add(&k.SecretList, "empty")
		}
		for i := range k.SecretList {
			v.secretLen(&k.SecretList[i], k.SecretList[i])
		}
	default:
		if v.secretFile(&k.SecretFile, k.file, k.Secret) {
			v.secretLen(&k.SecretFile, k.Secret)
		}
	}
}

// secretLen checks the length of secret s, reported at field.
func (v teamsCheck) secretLen(field any, s Secret) {
	switch n := len(s.Reveal()); {
	case n == 0:
		v.add(field, "empty")
	case n < MinKeySecretLen:
		v.add(field, "too short: %d bytes, at least %d are required", n, MinKeySecretLen)
	}
}

// demoSecret refuses the published demo secrets on a team that can reach a
// real upstream, or on a gateway with a network listener off loopback:
// anyone who has read the source could use it, from anywhere the listener
// is reachable.
func (v teamsCheck) demoSecret(t *Team, k *Key, networks map[string]*Network) {
	demo := false
	for _, s := range k.Secrets() {
		if s == DemoKeySecret || s == ResearchKeySecret {
			demo = true
		}
	}
	if !demo {
		return
	}
	for _, name := range t.Networks {
		if n := networks[name]; n != nil && !localUpstream(n.Upstream.URL) {
			v.add(k, "uses a published demo secret, which may only reach the embedded or a loopback upstream, not %s", v.at.of(n))
			return
		}
	}
	for _, name := range sortedKeys(networks) {
		if n := networks[name]; n != nil && n.Listen != "" && !loopbackAddr(n.Listen) {
			v.add(k, "uses a published demo secret, which may only be served on loopback listeners, not %s %q", v.at.of(&n.Listen), n.Listen)
			return
		}
	}
}

func localUpstream(raw string) bool {
	if raw == EmbeddedURL || raw == "" {
		return true
	}
	u, err := url.Parse(raw)
	if err != nil {
		return true // reported as a URL problem
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clientCert checks a key's client certificate binding: a pin that parses,
// and networks that ask for client certificates.
func (v teamsCheck) clientCert(t *Team, k *Key, networks map[string]*Network) {
	c := k.ClientCert
	if c == nil {
		return
	}
	if c.SPKISHA256 == "" && c.SAN == "" {
		v.add(c, "give spki_sha256, san or both: the certificate the key must come with")
	}
	if c.SPKISHA256 != "" {
		if _, err := auth.ParseSPKI(c.SPKISHA256); err != nil {
			v.add(&c.SPKISHA256, "want the SHA-256 of the certificate's public key, 64 hex digits or 44 base64 characters")
		}
	}
	for _, name := range t.Networks {
		if n := networks[name]; n != nil && !n.TLS.asksClientCerts() {
			v.add(c, "network %s does not verify client certificates: set %s.client_auth to verify_if_given or require (with client_ca_file)", name, v.at.of(&n.TLS))
		}
	}
}
