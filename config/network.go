// This file holds the schema of a network: its listener, its upstream and
// credentials, the verification of its reports, and the Rate of budgets
// and limits.

package config

import (
	"fmt"
	"time"

	"streamgate/don"
)

// Network is one upstream network (mainnet, testnet, ...) and the listener
// its clients call. A client picks a network by the address it calls: the
// listen address, or a Host name when several networks share a listener.
type Network struct {
	// Listen is the host:port this network is served on. Required.
	// Several networks may share one address if each of them lists Hosts.
	Listen string `yaml:"listen" json:"listen"`
	// Hosts are the Host names (no scheme, no port; lower-cased at load)
	// routed to this network on a shared listener. Default none.
	Hosts []string `yaml:"hosts" json:"hosts"`
	// TLS, when set, serves this network over HTTPS and WSS (see TLS).
	// Networks sharing a listener share its TLS block: give them the same
	// one. Default none (plain HTTP).
	TLS *TLS `yaml:"tls" json:"tls"`
	// PassThrough lists extra paths under /api/v1/ that are forwarded to
	// the upstream as they are (GET or HEAD, authenticated, re-signed with
	// the organisation's credential, within the budget), for upstream
	// endpoints the gateway does not know. Every other unknown path is 404
	// at the gateway. Exact paths, without query. Default none.
	PassThrough []string `yaml:"pass_through" json:"pass_through"`
	// Upstream is the service this network's requests go to.
	Upstream Upstream `yaml:"upstream" json:"upstream"`
	// Verify is how the network checks the DON's signatures of the reports
	// it receives. Reloaded by SIGHUP (the file too).
	Verify Verify `yaml:"verify" json:"verify"`
}

// The verification modes.
const (
	// VerifyEnforce: a report that does not verify is never cached or
	// served: the client gets 502, a stream frame is dropped.
	VerifyEnforce = "enforce"
	// VerifyReport: such a report is served, counted and logged.
	VerifyReport = "report"
	// VerifyOff: reports are not checked.
	VerifyOff = "off"
)

// Verify is a network's report verification: the DON configurations it
// trusts and what it does with a report that does not verify.
type Verify struct {
	// Mode is enforce, report or off; "" (the default) means enforce when
	// DONs or DONsFile are given or the upstream is embedded (whose DON is
	// the simulator's), else off: see Network.VerifyMode.
	Mode string `yaml:"mode" json:"mode"`
	// DONs are the DON configurations to trust, inline.
	DONs []DON `yaml:"dons" json:"dons"`
	// DONsFile is a YAML (or JSON) file holding a list of DON
	// configurations, read at every load (so SIGHUP re-reads it), trusted
	// with DONs. A relative path is relative to the configuration file.
	DONsFile string `yaml:"dons_file" json:"dons_file"`

	fileDONs []DON
	file     fileState
}

// DON is one DON configuration, as the Verifier contract's ConfigSet event
// states it.
type DON struct {
	// ConfigDigest is 0x and 64 hex digits: the first word of the context
	// of every report the configuration signs.
	ConfigDigest string `yaml:"config_digest" json:"config_digest"`
	// F is the number of faulty signers tolerated: a report needs more
	// than F signatures.
	F int `yaml:"f" json:"f"`
	// Signers are the signer addresses, 0x and 40 hex digits.
	Signers []string `yaml:"signers" json:"signers"`
}

// AllDONs returns the DON configurations of v, inline and from its file.
func (v *Verify) AllDONs() []DON { return append(append([]DON(nil), v.DONs...), v.fileDONs...) }

// VerifyMode returns the verification mode in force: Verify.Mode, or its
// default.
func (n *Network) VerifyMode() string {
	switch {
	case n.Verify.Mode != "":
		return n.Verify.Mode
	case n.Verify.Configured() || n.Upstream.Embedded():
		return VerifyEnforce
	}
	return VerifyOff
}

// Verifier returns the don.Verifier of the DON configurations of v (inline
// and from its file), or an error for one that does not parse.
func (v *Verify) Verifier() (*don.Verifier, error) {
	var cs []don.Config
	for i, d := range v.AllDONs() {
		dg, err := don.ParseDigest(d.ConfigDigest)
		if err != nil {
			return nil, fmt.Errorf("DON configuration %d: %w", i, err)
		}
		c := don.Config{Digest: dg, F: d.F}
		for _, s := range d.Signers {
			a, err := don.ParseAddress(s)
			if err != nil {
				return nil, fmt.Errorf("DON configuration %d: %w", i, err)
			}
			c.Signers = append(c.Signers, a)
		}
		cs = append(cs, c)
	}
	return don.NewVerifier(cs)
}

// Configured reports whether v names any DON configuration.
func (v *Verify) Configured() bool { return len(v.DONs) > 0 || v.DONsFile != "" }

// Upstream is the Data Streams service behind a network, and how the
// gateway calls it.
type Upstream struct {
	// URL is "embedded", which starts the built-in simulator (a build with
	// the tag nosimulator has none and refuses it: server.CheckBuild), or the
	// absolute http(s) URL of the service, without path, query or user
	// information (e.g. https://api.dataengine.chain.link). Default
	// "embedded" for the networks named mainnet and testnet; required for
	// any other network.
	URL string `yaml:"url" json:"url"`
	// Credentials are the organisation's API key and secret, required for a
	// non-embedded upstream. For an embedded one they are optional and,
	// when given, are the credentials the simulator accepts.
	Credentials `yaml:",inline"`
	// Timeout bounds each attempt. Default 5s.
	Timeout time.Duration `yaml:"timeout" json:"timeout"`
	// Retries is the number of extra attempts after a 500, 502, 503 or
	// 504, a timeout or a transport failure (never after a 429, which
	// pauses the endpoint). Default 2; 0 disables retries.
	Retries int `yaml:"retries" json:"retries"`
	// Budget is the rate of upstream calls per endpoint, shared by all
	// teams: at most RPS calls in any one second, the calls spaced at
	// least 1/RPS + BudgetMargin apart, so that an upstream counting per
	// calendar second, per sliding second or as a token bucket of burst 1
	// never finds its limit exceeded. Burst no longer lets calls go out
	// faster than that (it must still be at least 1; values above 1 change
	// nothing). After an upstream 429 the rate in force halves and
	// recovers step by step. Default {rps: 10, burst: 10}.
	Budget Rate `yaml:"budget" json:"budget"`
	// BudgetMargin is added to the interval 1/rps between two upstream
	// calls of an endpoint: a safety margin for an upstream that sees the
	// calls closer together than they were sent (network and scheduling
	// jitter). Default 20ms; 0 to 1s.
	BudgetMargin time.Duration `yaml:"budget_margin" json:"budget_margin"`
	// MaxBulk is the largest number of streams in one upstream bulk call;
	// larger requests are split. Default 100.
	MaxBulk int `yaml:"max_bulk" json:"max_bulk"`
	// WSURL is the upstream's WebSocket address, ws:// or wss://, host
	// only (e.g. wss://ws.dataengine.chain.link). An embedded upstream
	// needs none. Without it /api/v1/ws answers a clear error: the
	// gateway never passes a WebSocket through one to one. Default none.
	WSURL string `yaml:"ws_url" json:"ws_url"`
	// WSMaxConnections bounds the upstream WebSocket connections of this
	// network, all origins and feed chunks together. The upstream allows
	// 20 per user; several replicas must fit. Default 6.
	WSMaxConnections int `yaml:"ws_max_connections" json:"ws_max_connections"`
	// WSFeedsPerConnection is the most feeds on one upstream connection
	// (about 68 bytes each in its request line). Default 50.
	WSFeedsPerConnection int `yaml:"ws_feeds_per_connection" json:"ws_feeds_per_connection"`
	// WSPinned are streams the gateway always carries on its upstream
	// WebSocket, so that their latest reports are answered from the
	// stream; stream IDs in any case, kept in canonical form. Default none.
	WSPinned StreamIDs `yaml:"ws_pinned" json:"ws_pinned"`
}

// Embedded reports whether the upstream is the built-in simulator.
func (u Upstream) Embedded() bool { return u.URL == EmbeddedURL }

// Credentials are an API key and its secret, given inline (APISecret) or
// as a file (APISecretFile), exactly one of the two.
type Credentials struct {
	// APIKey is the key ID sent in the Authorization header.
	APIKey string `yaml:"api_key" json:"api_key"`
	// APISecret is the HMAC secret. After loading it also holds the
	// contents of APISecretFile.
	APISecret Secret `yaml:"api_secret" json:"api_secret"`
	// APISecretFile is a file holding the secret, read at load time with
	// trailing line breaks removed. A relative path is relative to the
	// directory of the configuration file (Load) or the working directory
	// (Parse).
	APISecretFile string `yaml:"api_secret_file" json:"api_secret_file"`

	file fileState
}

// Secret returns the secret of the credentials: APISecret, or the contents
// of APISecretFile once read. It is empty when neither is set.
func (c Credentials) Secret() Secret { return c.APISecret }

// Rate is a token bucket: RPS tokens per second, at most Burst at once.
type Rate struct {
	// RPS is the sustained rate in requests per second; fractions are
	// allowed. For a team or a key, 0 means no limit.
	RPS float64 `yaml:"rps" json:"rps"`
	// Burst is the bucket size in requests. When omitted it defaults to
	// RPS rounded up (at least 1), or 0 when RPS is 0.
	Burst int `yaml:"burst" json:"burst"`
}

// Unlimited reports whether the rate sets no limit (RPS is 0).
func (r Rate) Unlimited() bool { return r.RPS == 0 }
