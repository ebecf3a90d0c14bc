package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharingConfig is the demo configuration with three teams more on
// mainnet: a and b on one API key of their own, c on another, and d on
// the network's own key.
func sharingConfig(mode Sharing) *Config {
	c := Default()
	c.Sharing = mode
	c.Networks["mainnet"].Upstream.APIKey, c.Networks["mainnet"].Upstream.APISecret = "org-key", "org-secret-0123456789"
	add := func(name, key, secret string) {
		t := Team{Name: name, Networks: []string{"mainnet"}, Feeds: StreamIDs{AllFeedsWildcard},
			Keys: []Key{{ID: "client-" + name, Secret: Secret("client-secret-0123456789-" + name)}}}
		if key != "" {
			t.Upstream = map[string]*Credentials{"mainnet": {APIKey: key, APISecret: Secret(secret)}}
		}
		c.Teams = append(c.Teams, t)
	}
	add("b", "shared-key", "shared-secret-0123456789")
	add("a", "shared-key", "shared-secret-0123456789")
	add("c", "own-key", "own-secret-0123456789")
	add("d", "org-key", "org-secret-0123456789")
	return c
}

func TestPartitions(t *testing.T) {
	c := sharingConfig(SharingCredential)
	parts := c.Partitions("mainnet")
	require.Len(t, parts, 3, "the network's, and one per distinct key of its teams")
	assert.Equal(t, "", parts[0].Name)
	assert.Equal(t, "org-key", parts[0].Credentials.APIKey)
	assert.Equal(t, []string{"d", DemoTeam}, parts[0].Teams, "the teams without a key of their own, and the one on the network's key")
	byKey := map[string]Partition{}
	for _, p := range parts[1:] {
		byKey[p.Credentials.APIKey] = p
		assert.Equal(t, PartitionName(p.Credentials.APIKey), p.Name)
		assert.NotContains(t, p.Name, p.Credentials.APIKey, "a partition's name never holds the key")
		assert.Regexp(t, `^c[0-9a-f]{10}$`, p.Name)
	}
	assert.Equal(t, []string{"a", "b"}, byKey["shared-key"].Teams, "teams on one key share its partition")
	assert.Equal(t, []string{"c"}, byKey["own-key"].Teams)
	assert.Equal(t, "mainnet@"+byKey["own-key"].Name, byKey["own-key"].Label("mainnet"))
	assert.Equal(t, "mainnet", parts[0].Label("mainnet"))

	assert.Equal(t, byKey["shared-key"].Name, c.TeamPartition(c.Team("a"), "mainnet"))
	assert.Equal(t, "", c.TeamPartition(c.Team("d"), "mainnet"), "a team on the network's key is in its partition")
	assert.Equal(t, "", c.TeamPartition(c.Team(DemoTeam), "mainnet"))
	assert.Equal(t, "", c.TeamPartition(c.Team("c"), "testnet"), "a network the team has no key for")

	n, p := SplitPartitionLabel(byKey["own-key"].Label("mainnet"))
	assert.Equal(t, "mainnet", n)
	assert.Equal(t, byKey["own-key"].Name, p)
	n, p = SplitPartitionLabel("testnet")
	assert.Equal(t, "testnet", n)
	assert.Equal(t, "", p)
	assert.Equal(t, []string{"mainnet", parts[1].Label("mainnet"), parts[2].Label("mainnet"), "testnet"}, c.PartitionLabels())

	org := sharingConfig(SharingOrganisation)
	parts = org.Partitions("mainnet")
	require.Len(t, parts, 1, "sharing: organisation: one partition, the network's")
	assert.Equal(t, []string{"a", "b", "c", "d", DemoTeam}, parts[0].Teams)
	assert.Equal(t, "", org.TeamPartition(org.Team("c"), "mainnet"))
	assert.Nil(t, org.Partitions("nonet"))
}

func TestValidateSharing(t *testing.T) {
	c := sharingConfig(SharingCredential)
	require.NoError(t, c.Validate())
	assert.NoError(t, sharingConfig(SharingOrganisation).Validate())

	c.Sharing = "everyone"
	err := c.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `sharing: must be "organisation" or "credential"`)

	c = sharingConfig(SharingCredential)
	c.Team("a").Upstream["mainnet"].APISecret = "another-secret-0123456789"
	err = c.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `uses the same api_key on network mainnet with another secret`)
	assert.NotContains(t, err.Error(), "another-secret", "no secret in a problem")
	c.Sharing = SharingOrganisation
	assert.NoError(t, c.Validate(), "with sharing: organisation a team's key is its REST calls' only")
}

func TestSharingRestartOnly(t *testing.T) {
	running, next := sharingConfig(SharingOrganisation), sharingConfig(SharingCredential)
	assert.Equal(t, []string{"sharing"}, RestartOnly(running, next)[:1], "the mode")

	running = sharingConfig(SharingCredential)
	next = sharingConfig(SharingCredential)
	next.Team("c").Upstream["mainnet"].APIKey = "yet-another-key"
	changed := RestartOnly(running, next)
	require.NotEmpty(t, changed, "with credential a team's key is a partition: fixed at start")
	for _, k := range changed {
		assert.True(t, strings.HasPrefix(k, "teams[].upstream.mainnet (sharing: credential)"), k)
		assert.NotContains(t, k, "yet-another-key")
	}

	running, next = sharingConfig(SharingOrganisation), sharingConfig(SharingOrganisation)
	next.Team("c").Upstream["mainnet"].APIKey = "yet-another-key"
	assert.Empty(t, RestartOnly(running, next), "with organisation a team's key changes by a reload, as REST takes it")
}

func TestSharingSummary(t *testing.T) {
	c := sharingConfig(SharingCredential)
	lines := c.SharingSummary()
	require.Len(t, lines, 2)
	assert.Contains(t, lines[0], "sharing credential: networks.mainnet: 3 stream partitions, at most 18 upstream WebSocket connections")
	assert.Contains(t, lines[0], "the network's credential serves teams d, "+DemoTeam)
	assert.Contains(t, lines[0], "serves teams a, b only")
	assert.Contains(t, lines[0], "serves team c only")
	assert.Contains(t, lines[1], "networks.testnet: 1 stream partitions")
	for _, l := range lines {
		for _, secret := range []string{"shared-key", "own-key", "org-key", "secret"} {
			assert.NotContains(t, l, secret)
		}
	}
	c = sharingConfig(SharingOrganisation)
	lines = c.SharingSummary()
	assert.Contains(t, lines[0], "sharing organisation: networks.mainnet: every team's stream comes under the network's credential, the teams with a credential of their own included (a, b, c, d:")
	assert.Contains(t, lines[0], "at most 6 upstream WebSocket connections per replica")
}
