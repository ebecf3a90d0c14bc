package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
)

// Sharing is sharing, the scope within which a report fetched or streamed
// under one upstream credential is served again.
type Sharing string

// The values of sharing.
const (
	// SharingOrganisation serves every team from the organisation's
	// credential where a team has none of its own, and shares the stream:
	// each network's upstream WebSocket connections are opened under its
	// credential and carry every team's streams, a team with a credential
	// of its own included. REST answers are scoped by credential in both
	// modes.
	SharingOrganisation Sharing = "organisation"
	// SharingCredential partitions the stream by credential too: each
	// upstream credential of a network (the network's own, and every
	// distinct one of its teams' teams[].upstream) has its own upstream
	// connections, within its own ws_max_connections, its own history and
	// latest reports, resume records and archive partition, and serves only
	// the teams that use it.
	SharingCredential Sharing = "credential"
)

func (s Sharing) valid() bool { return s == SharingOrganisation || s == SharingCredential }

// A Partition is one upstream credential of a network as the stream uses
// it under sharing: credential: the teams that use it and its name. The
// network's own credential is the partition named "" (the network's
// name alone); a team's is named by a digest of its API key, never the
// key itself, so that the name may appear in metrics, logs and Redis keys.
type Partition struct {
	// Name is "" for the network's credential, else "c" and 10 hex digits
	// of the SHA-256 of the API key.
	Name string
	// Credentials are the upstream credentials the partition's calls and
	// connections are signed with.
	Credentials *Credentials
	// Teams are the names of the teams the partition serves, sorted; for
	// the network's partition, those of the network's teams without a
	// credential of their own.
	Teams []string
}

// Label returns the partition's name within network: network itself for
// the network's credential, else network@Name.
func (p Partition) Label(network string) string { return PartitionLabel(network, p.Name) }

// PartitionLabel returns the label of partition name of network: network
// for "", else network@name.
func PartitionLabel(network, name string) string {
	if name == "" {
		return network
	}
	return network + "@" + name
}

// PartitionName returns the name of the partition of a team credential
// whose API key is apiKey.
func PartitionName(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return "c" + hex.EncodeToString(sum[:5])
}

// Partitions returns the stream partitions of network name: with sharing:
// organisation one, the network's (every team of the network in it); with
// sharing: credential, the network's and one per distinct API key of the
// network's teams' own credentials (teams with the same key share one, a
// team whose key is the network's is in the network's), sorted by name,
// the network's first. Nil for a network that is not configured.
func (c *Config) Partitions(name string) []Partition {
	n := c.Networks[name]
	if n == nil {
		return nil
	}
	org := Partition{Credentials: &n.Upstream.Credentials}
	byName := map[string]*Partition{}
	for i := range c.Teams {
		t := &c.Teams[i]
		if !t.HasNetwork(name) {
			continue
		}
		cr := t.Upstream[name]
		if c.Sharing != SharingCredential || cr == nil || cr.APIKey == "" || cr.APIKey == n.Upstream.APIKey {
			org.Teams = append(org.Teams, t.Name)
			continue
		}
		pn := PartitionName(cr.APIKey)
		p := byName[pn]
		if p == nil {
			p = &Partition{Name: pn, Credentials: cr}
			byName[pn] = p
		}
		p.Teams = append(p.Teams, t.Name)
	}
	sort.Strings(org.Teams)
	out := []Partition{org}
	for _, pn := range sortedKeys(byName) {
		p := byName[pn]
		sort.Strings(p.Teams)
		out = append(out, *p)
	}
	return out
}

// TeamPartition returns the name of the stream partition of team on
// network: "" (the network's) unless sharing is credential and the team
// has a credential of its own there other than the network's.
func (c *Config) TeamPartition(team *Team, network string) string {
	if c.Sharing != SharingCredential || team == nil {
		return ""
	}
	cr := team.Upstream[network]
	n := c.Networks[network]
	if cr == nil || cr.APIKey == "" || n == nil || cr.APIKey == n.Upstream.APIKey {
		return ""
	}
	return PartitionName(cr.APIKey)
}

// validateSharing checks sharing, and with credential that the teams
// sharing an API key on a network sign with the same secret: they share one
// partition, whose calls and connections are signed once.
func validateSharing(ck check, c *Config) Problems {
	v := ck.validator()
	if !c.Sharing.valid() {
		v.add(&c.Sharing, "must be %q or %q", SharingOrganisation, SharingCredential)
		return v.problems
	}
	if c.Sharing != SharingCredential {
		return nil
	}
	for _, name := range c.NetworkNames() {
		first := map[string]*Team{} // API key → the first team that uses it
		for i := range c.Teams {
			t := &c.Teams[i]
			cr := t.Upstream[name]
			if cr == nil || cr.APIKey == "" {
				continue
			}
			prev, ok := first[cr.APIKey]
			if !ok {
				first[cr.APIKey] = t
				continue
			}
			if prev.Upstream[name].Secret() != cr.Secret() {
				v.addAt(joinKey(v.at.of(&t.Upstream), name),
					"team %q uses the same api_key on network %s with another secret: with sharing: credential the teams of one key share its stream partition, signed once", prev.Name, name)
			}
		}
	}
	return v.problems
}

// SplitPartitionLabel returns the network and the partition name of a
// label (PartitionLabel): a network's name alone is its "" partition.
func SplitPartitionLabel(label string) (network, partition string) {
	network, partition, _ = strings.Cut(label, "@")
	return network, partition
}

// PartitionLabels returns the labels of every network's stream partitions
// (PartitionLabel), by network name and then partition: the names the
// archive keeps reports under.
func (c *Config) PartitionLabels() []string {
	var out []string
	for _, name := range c.NetworkNames() {
		for _, p := range c.Partitions(name) {
			out = append(out, p.Label(name))
		}
	}
	return out
}

// SharingSummary says, a line per network that streams or has teams, what
// sharing implies for it: under which credential each team's stream comes,
// and how many upstream WebSocket connections the configuration may open
// (ws_max_connections per partition; with the stream shared between
// replicas through Redis the whole fleet holds that many, else each
// replica). For check.
func (c *Config) SharingSummary() []string {
	var out []string
	perReplica := ""
	if !c.Shared() {
		perReplica = " per replica (realtime.share is off or the limits are in memory: each replica holds its own)"
	}
	for _, name := range c.NetworkNames() {
		n := c.Networks[name]
		parts := c.Partitions(name)
		max := n.Upstream.WSMaxConnections
		var b strings.Builder
		if c.Sharing != SharingCredential {
			fmt.Fprintf(&b, "sharing organisation: networks.%s: every team's stream comes under the network's credential", name)
			var own []string
			for i := range c.Teams {
				if t := &c.Teams[i]; t.HasNetwork(name) && t.Upstream[name] != nil && t.Upstream[name].APIKey != "" {
					own = append(own, t.Name)
				}
			}
			if len(own) > 0 {
				sort.Strings(own)
				fmt.Fprintf(&b, ", the teams with a credential of their own included (%s: their REST calls are signed with it; sharing: credential gives them their own stream too)", strings.Join(own, ", "))
			}
			fmt.Fprintf(&b, "; at most %d upstream WebSocket connections%s", max, perReplica)
			out = append(out, b.String())
			continue
		}
		fmt.Fprintf(&b, "sharing credential: networks.%s: %d stream partitions, at most %d upstream WebSocket connections%s (ws_max_connections, %d, for each credential)",
			name, len(parts), max*len(parts), perReplica, max)
		for _, p := range parts {
			teams := "no team"
			switch len(p.Teams) {
			case 0:
			case 1:
				teams = "team " + p.Teams[0]
			default:
				teams = "teams " + strings.Join(p.Teams, ", ")
			}
			if p.Name == "" {
				fmt.Fprintf(&b, "; the network's credential serves %s (without a credential of their own)", teams)
			} else {
				fmt.Fprintf(&b, "; credential %s (%s) serves %s only", p.Name, PartitionLabel(name, p.Name), teams)
			}
		}
		out = append(out, b.String())
	}
	return out
}
