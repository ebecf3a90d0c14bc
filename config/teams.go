// This file holds the schema of the teams and their keys.

package config

import "slices"

// Team is a group of clients that share entitlements and limits.
type Team struct {
	// Name identifies the team in logs and metrics: letters, digits, '.',
	// '_' and '-', at most 64. Required, unique.
	Name string `yaml:"name" json:"name"`
	// Networks the team may call. Required, each a configured network.
	Networks []string `yaml:"networks" json:"networks"`
	// Feeds the team may read: ["*"] for every stream the organisation's
	// credential reaches, hidden ones included, or a list of stream IDs
	// ("0x" and 64 hex digits, lower-cased at load). Required. The
	// wildcard is an item of the list as written: read it with AllFeeds
	// and the stream IDs with Feeds.IDs, not the list as IDs.
	Feeds StreamIDs `yaml:"feeds" json:"feeds"`
	// Rate limits the team's requests, all keys together. Default no limit.
	Rate Rate `yaml:"rate" json:"rate"`
	// DailyQuota is the number of requests per UTC day. Default 0,
	// unlimited.
	DailyQuota int64 `yaml:"daily_quota" json:"daily_quota"`
	// Upstream optionally gives the team its own upstream credentials,
	// keyed by the name of one of the team's networks; networks not listed
	// use the network's credentials. Each needs api_key and a secret.
	Upstream map[string]*Credentials `yaml:"upstream" json:"upstream"`
	// Keys are the team's client keys. At least one is required.
	Keys []Key `yaml:"keys" json:"keys"`
}

// AllFeeds reports whether the team may read every stream (feeds: ["*"]).
func (t *Team) AllFeeds() bool { return len(t.Feeds) == 1 && t.Feeds[0] == AllFeedsWildcard }

// HasNetwork reports whether the team may call the network name.
func (t *Team) HasNetwork(name string) bool { return slices.Contains(t.Networks, name) }

// Key is one client key of a team. Exactly one of Secret, SecretList and
// SecretFile is set in the file; use Secrets to read the key's secrets.
type Key struct {
	// ID is the key ID that clients send in the Authorization header (the
	// upstream uses UUIDs). Required, unique across all teams.
	ID string `yaml:"id" json:"id"`
	// Secret is the key's HMAC secret, at least 16 bytes. After loading it
	// also holds the contents of SecretFile.
	Secret Secret `yaml:"secret" json:"secret"`
	// SecretList (YAML "secrets") holds several secrets while one is being
	// rotated, the current one first; a request signed with any verifies.
	SecretList []Secret `yaml:"secrets" json:"secrets"`
	// SecretFile is a file holding the secret, read at load time like
	// Credentials.APISecretFile.
	SecretFile string `yaml:"secret_file" json:"secret_file"`
	// Rate optionally limits this key on its own, within the team's rate.
	// Default no limit.
	Rate Rate `yaml:"rate" json:"rate"`
	// ClientCert, when set, binds the key to a client certificate (see
	// ClientCert): every network of its team must verify client
	// certificates (tls.client_auth verify_if_given or require). Default
	// none: the key works over any connection.
	ClientCert *ClientCert `yaml:"client_cert" json:"client_cert"`

	file fileState
}

// Secrets returns the secrets a request signed with this key may use, the
// current one first: Secret (or the contents of SecretFile), else
// SecretList. The returned slice is a copy.
func (k *Key) Secrets() []Secret {
	if k.Secret != "" {
		return []Secret{k.Secret}
	}
	return slices.Clone(k.SecretList)
}
