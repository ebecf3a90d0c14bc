package config

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"streamgate/don"
)

var (
	networkNameRE = regexp.MustCompile(`^[a-z0-9-]{1,63}$`)
	keyIDRE       = regexp.MustCompile(`^[!-~]{1,128}$`) // printable ASCII, no space
	hostRE        = regexp.MustCompile(`^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$`)
	passPathRE    = regexp.MustCompile(`^/api/v1(/[A-Za-z0-9_-]+)+$`)
)

// networksCheck is the validator of the networks section with the checks
// only a network's settings need: its upstream and its verification.
type networksCheck struct{ *validator }

func validateNetworks(ck check, c *Config) Problems {
	v, networks := networksCheck{ck.validator()}, c.Networks
	if len(networks) == 0 {
		v.add(&c.Networks, "none configured: at least one network is required")
		return v.problems
	}
	byListen := map[string][]string{}
	for _, name := range sortedKeys(networks) {
		p := joinKey(v.at.of(&c.Networks), name)
		n := networks[name]
		if !networkNameRE.MatchString(name) {
			v.addAt(p, "network name must be 1 to 63 of a-z, 0-9 and '-'")
		}
		if n == nil {
			v.addAt(p, "empty: listen is required")
			continue
		}
		v.listen(&n.Listen)
		if n.Listen != "" && !anyPort(n.Listen) {
			byListen[n.Listen] = append(byListen[n.Listen], name)
		}
		for i, h := range n.Hosts {
			if !hostRE.MatchString(h) {
				v.add(&n.Hosts[i], "%q is not a host name (give it without scheme or port)", h)
			}
		}
		for i, pt := range n.PassThrough {
			if !passPathRE.MatchString(pt) {
				v.add(&n.PassThrough[i], "%q must be a path under /api/v1/ of letters, digits, '-', '_' and single slashes, without query (e.g. /api/v1/something)", pt)
			}
		}
		v.upstream(name, &n.Upstream)
		v.verify(n)
		if n.TLS != nil {
			v.tls(n.TLS)
		}
	}

	listens := make([]string, 0, len(byListen))
	for l := range byListen {
		listens = append(listens, l)
	}
	sort.Strings(listens)
	for _, l := range listens {
		names := byListen[l]
		if len(names) < 2 {
			continue
		}
		hostOwner := map[string]string{}
		first := networks[names[0]]
		for _, name := range names[1:] {
			if n := networks[name]; !sameTLS(first.TLS, n.TLS) {
				v.add(&n.TLS, "listen address %q is shared with %s, whose tls block differs: networks on one listener share its TLS", l, v.at.of(first))
			}
		}
		for _, name := range names {
			n := networks[name]
			if len(n.Hosts) == 0 {
				others := make([]string, 0, len(names)-1)
				for _, o := range without(names, name) {
					others = append(others, v.at.of(networks[o]))
				}
				v.add(&n.Hosts, "required: listen address %q is shared with %s", l, strings.Join(others, ", "))
			}
			for i, h := range n.Hosts {
				if other, dup := hostOwner[h]; dup && other != name {
					v.add(&n.Hosts[i], "%q is also a host of %s on the same listener", h, v.at.of(networks[other]))
				}
				hostOwner[h] = name
			}
		}
	}
	return v.problems
}

func (v networksCheck) upstream(network string, u *Upstream) {
	remote := false
	switch {
	case u.URL == "" && knownNetworks[network]:
		v.add(&u.URL, "empty: use %q or the upstream's http(s) URL", EmbeddedURL)
	case u.URL == "":
		v.add(&u.URL, "required for a network other than mainnet and testnet: %q or the upstream's http(s) URL", EmbeddedURL)
	case u.URL == EmbeddedURL:
	default:
		remote = true
		v.upstreamURL(&u.URL)
	}
	v.credentials(&u.Credentials, remote)
	v.positive(&u.Timeout)
	if u.Retries < 0 {
		v.add(&u.Retries, "must not be negative")
	}
	v.rate(&u.Budget, true)
	if u.BudgetMargin < 0 || u.BudgetMargin > time.Second {
		v.add(&u.BudgetMargin, "must be from 0 to 1s")
	}
	if u.MaxBulk < 1 {
		v.add(&u.MaxBulk, "must be at least 1")
	}
	if u.WSURL != "" {
		v.wsURL(&u.WSURL)
	}
	if u.WSMaxConnections < 1 || u.WSMaxConnections > 20 {
		v.add(&u.WSMaxConnections, "must be from 1 to 20 (the upstream allows 20 per user, for every replica together)")
	}
	if u.WSFeedsPerConnection < 1 || u.WSFeedsPerConnection > 100 {
		v.add(&u.WSFeedsPerConnection, "must be from 1 to 100 (each feed adds about 68 bytes to the request line)")
	}
	for i := range u.WSPinned {
		v.streamID(&u.WSPinned[i])
	}
}

func (v networksCheck) wsURL(field *string) {
	u, err := url.Parse(*field)
	switch {
	case err != nil:
		v.add(field, "not a URL")
	case u.Scheme != "ws" && u.Scheme != "wss":
		v.add(field, "must be a ws:// or wss:// URL")
	case u.Host == "":
		v.add(field, "has no host")
	case u.User != nil:
		v.add(field, "must not contain user information: the gateway signs with api_key and api_secret")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		v.add(field, "must be the service's root address, without path or query (the stream lives at /api/v1/ws)")
	}
}

func (v networksCheck) upstreamURL(field *string) {
	u, err := url.Parse(*field)
	switch {
	case err != nil:
		v.add(field, "not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(field, "must be %q or an http:// or https:// URL", EmbeddedURL)
	case u.Host == "":
		v.add(field, "has no host")
	case u.User != nil:
		v.add(field, "must not contain user information: use api_key and api_secret")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		v.add(field, "must be the service's root URL, without path, query or fragment (the API lives at /api/v1 of the host)")
	}
}

// credentials checks an API key and its secret. They are required when
// required is set; else both or neither must be given.
func (v *validator) credentials(c *Credentials, required bool) {
	inline := c.APISecret != "" && !c.file.read
	if inline && c.APISecretFile != "" {
		v.eitherOr(&c.APISecret, &c.APISecretFile)
		return
	}
	if c.APISecretFile != "" {
		v.secretFile(&c.APISecretFile, c.file, c.APISecret)
	}
	hasSecret := inline || c.APISecretFile != ""
	if c.APIKey == "" && (required || hasSecret) {
		v.add(&c.APIKey, "required")
	}
	if !hasSecret && (required || c.APIKey != "") {
		v.add(&c.APISecret, "required (or %s)", lastKey(v.at.of(&c.APISecretFile)))
	}
	if c.APIKey != "" && !keyIDRE.MatchString(c.APIKey) {
		v.add(&c.APIKey, "must be 1 to 128 printable ASCII characters without spaces")
	}
}

// secret checks a secret given inline or as a file (read at load, its
// state st), not both.
func (v *validator) secret(secret *Secret, file *string, st fileState) {
	inline := *secret != "" && !st.read
	switch {
	case inline && *file != "":
		v.eitherOr(secret, file)
	case *file != "":
		v.secretFile(file, st, *secret)
	}
}

// eitherOr reports a secret given both inline and as a file.
func (v *validator) eitherOr(secret *Secret, file *string) {
	v.add(secret, "give either %s or %s, not both", lastKey(v.at.of(secret)), lastKey(v.at.of(file)))
}

// lastKey returns the last key of a path.
func lastKey(path string) string { return path[strings.LastIndexByte(path, '.')+1:] }

func (v networksCheck) verify(n *Network) {
	vf := &n.Verify
	before := len(v.problems)
	switch n.VerifyMode() {
	case VerifyEnforce, VerifyReport:
		if !vf.Configured() && !n.Upstream.Embedded() {
			v.add(&vf.Mode, "%s needs the DON configurations to trust: dons or dons_file (only an embedded upstream brings its own)", n.VerifyMode())
		}
	case VerifyOff:
	default:
		v.add(&vf.Mode, "%q is not one of enforce, report, off", vf.Mode)
	}
	if vf.DONsFile != "" {
		switch {
		case !vf.file.read:
			v.add(&vf.DONsFile, "not read: Load and Parse read it, Validate does not")
		case vf.file.err != nil:
			v.add(&vf.DONsFile, "%v", vf.file.err)
		case len(vf.fileDONs) == 0:
			v.add(&vf.DONsFile, "holds no DON configuration")
		}
		for i := range vf.fileDONs {
			v.adopt(&vf.fileDONs[i], itemPath(v.at.of(&vf.DONsFile), i))
			v.don(&vf.fileDONs[i])
		}
	}
	for i := range vf.DONs {
		v.don(&vf.DONs[i])
	}
	if _, err := vf.Verifier(); err != nil && len(v.problems) == before {
		v.add(vf, "%v", err)
	}
	seen := map[string]bool{}
	for _, d := range vf.AllDONs() {
		k := strings.ToLower(d.ConfigDigest)
		if seen[k] {
			v.add(vf, "config digest %s is given twice", d.ConfigDigest)
		}
		seen[k] = true
	}
}

func (v networksCheck) don(d *DON) {
	if _, err := don.ParseDigest(d.ConfigDigest); err != nil {
		v.add(&d.ConfigDigest, "%v", err)
	}
	if d.F < 0 {
		v.add(&d.F, "must not be negative")
	}
	if len(d.Signers) <= d.F {
		v.add(&d.Signers, "%d signers cannot make more than f = %d signatures", len(d.Signers), d.F)
	}
	seen := map[string]bool{}
	for i, s := range d.Signers {
		if _, err := don.ParseAddress(s); err != nil {
			v.add(&d.Signers[i], "%v", err)
		}
		if seen[strings.ToLower(s)] {
			v.add(&d.Signers[i], "%s is given twice", s)
		}
		seen[strings.ToLower(s)] = true
	}
}

// tls checks a listener's TLS block; its files were read at load.
func (v *validator) tls(t *TLS) {
	if t.CertFile == "" {
		v.add(&t.CertFile, "required: the listener's PEM certificate")
	}
	if t.KeyFile == "" {
		v.add(&t.KeyFile, "required: the certificate's PEM private key")
	}
	switch {
	case !t.ClientAuth.Valid():
		v.add(&t.ClientAuth, "%q: want none, verify_if_given or require", t.ClientAuth)
	case t.asksClientCerts() && t.ClientCAFile == "":
		v.add(&t.ClientCAFile, "required by client_auth %s: the CA certificates that verify clients", t.ClientAuth)
	case !t.asksClientCerts() && t.ClientCAFile != "":
		v.add(&t.ClientCAFile, "set, but client_auth is none: no client certificate is asked for (use verify_if_given or require)")
	}
	if t.err != nil {
		v.add(t, "%v", t.err)
	}
}

func sameTLS(a, b *TLS) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Files() == b.Files()
}
