package auth

import (
	"errors"
	"fmt"

	"streamgate/feedid"
)

// Team is a group of keys that shares entitlements and a quota.
type Team struct {
	Name     string
	Networks []string // networks the team may call
	// All: the team may read every stream the organisation reaches (Feeds
	// is then not read); else the streams of Feeds.
	All   bool
	Feeds []feedid.ID
	Keys  []Key

	feeds    map[feedid.ID]struct{}
	networks map[string]struct{}
}

// Key is one client key. Secrets holds every secret that verifies: one
// normally, two while a secret is being rotated.
type Key struct {
	ID      string
	Secrets []string
	Cert    *CertRule // the client certificate the key must come with; nil for none
}

// Principal is an authenticated caller: the key that signed the request and
// the team that owns it.
type Principal struct {
	KeyID   string
	Team    *Team
	Cert    *CertRule // nil: the key may be used over any connection
	secrets []*macPool
}

// UsesNetwork reports whether the team may call network.
func (t *Team) UsesNetwork(network string) bool {
	_, ok := t.networks[network]
	return ok
}

// AllFeeds reports whether the team may read every stream the organisation
// reaches.
func (t *Team) AllFeeds() bool { return t.All }

// MayRead reports whether the team's entitlement covers feedID. It says
// nothing of whether the stream exists.
func (t *Team) MayRead(feedID feedid.ID) bool {
	if t.All {
		return true
	}
	_, ok := t.feeds[feedID]
	return ok
}

// KeyStore maps key IDs to principals. It is immutable once built and safe
// for concurrent use; a configuration reload builds a new one.
type KeyStore struct {
	keys  map[string]*Principal
	teams map[string]*Team
}

// NewKeyStore indexes teams and their keys. It refuses duplicate team names,
// duplicate key IDs and keys without a secret.
func NewKeyStore(teams []Team) (*KeyStore, error) {
	ks := &KeyStore{keys: map[string]*Principal{}, teams: map[string]*Team{}}
	var errs []error
	for i := range teams {
		t := teams[i] // copy: the store owns its teams
		if _, dup := ks.teams[t.Name]; dup {
			errs = append(errs, fmt.Errorf("auth: duplicate team %q", t.Name))
			continue
		}
		t.networks = make(map[string]struct{}, len(t.Networks))
		for _, n := range t.Networks {
			t.networks[n] = struct{}{}
		}
		t.feeds = make(map[feedid.ID]struct{}, len(t.Feeds))
		for _, f := range t.Feeds {
			t.feeds[f] = struct{}{}
		}
		tp := &t
		ks.teams[t.Name] = tp
		for _, k := range t.Keys {
			if _, dup := ks.keys[k.ID]; dup {
				errs = append(errs, fmt.Errorf("auth: duplicate key id %q", k.ID))
				continue
			}
			if len(k.Secrets) == 0 {
				errs = append(errs, fmt.Errorf("auth: key %q has no secret", k.ID))
				continue
			}
			p := &Principal{KeyID: k.ID, Team: tp, Cert: k.Cert}
			for _, s := range k.Secrets {
				p.secrets = append(p.secrets, newMACPool([]byte(s)))
			}
			ks.keys[k.ID] = p
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ks, nil
}

// Lookup returns the principal of keyID.
func (ks *KeyStore) Lookup(keyID string) (*Principal, bool) {
	p, ok := ks.keys[keyID]
	return p, ok
}

// Team returns the team called name.
func (ks *KeyStore) Team(name string) (*Team, bool) {
	t, ok := ks.teams[name]
	return t, ok
}
