package proxy

import (
	"sort"

	"streamgate/auth"
	"streamgate/config"
)

// The stream's partitions. With sharing: credential each upstream
// credential of a network has a hub of its own (the server starts one per
// config.Partition and gives it with Gateway.Stream): a team is served the
// stream, latest from the stream, resumes and the archive of its
// credential's partition (credential.part), and the partition's own work
// (its gap fills, its origin discoveries, its archive fills) is signed
// with that credential. With sharing: organisation there is one partition,
// "", the network's, under the organisation's credential.

// partitionCred returns the credential the stream partition part of n is
// served under: the organisation's for "", else that of a team in it (the
// teams of a partition share its API key and secret: config checks it),
// the first by name; nil when no team is in part.
func (n *network) partitionCred(part string) *credential {
	if part == "" {
		return n.org
	}
	pol := n.policy()
	names := make([]string, 0, len(pol.teams))
	for name := range pol.teams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if c := pol.teams[name].creds[n.name]; c != nil && c.part == part {
			return c
		}
	}
	return nil
}

// Partition returns the stream partition whose hub serves p's team on n
// (wsgate.REST): its credential's.
func (n *network) Partition(p *auth.Principal) string {
	return credentialFor(n.policy(), n.name, n.org, p.Team.Name).part
}

// label returns the name of partition part of n where a network's name is
// expected: the archive's, a resume record's.
func (n *network) label(part string) string { return config.PartitionLabel(n.name, part) }
