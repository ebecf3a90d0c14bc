package ratelimit

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"streamgate/internal/testing/redistest"
)

// One team's admission keys, as the Redis implementations prefix them,
// hash to one cluster slot; another team's to its own.
func TestTeamKeysShareOneSlot(t *testing.T) {
	o, _ := Options{}.withDefaults()
	keys := func(team string) []string {
		return []string{
			o.Prefix + "rate:" + TeamRateKey(team),
			o.Prefix + "rate:" + KeyRateKey(team, "k-1"),
			o.Prefix + "rate:" + KeyRateKey(team, "k-2"),
			o.Prefix + "quota:" + DailyKey(team) + ":2026-11-27",
			"streamgate:wsconns:" + TeamRateKey(team),
		}
	}
	a := keys("trading")
	for _, k := range a[1:] {
		assert.Equal(t, redistest.Slot(a[0]), redistest.Slot(k), k)
	}
	assert.NotEqual(t, redistest.Slot(a[0]), redistest.Slot(keys("research")[0]), "teams spread over the slots")
}
