package upstreamsim

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"streamgate/config"
	"streamgate/feedid"
)

// The gateway's demo configuration gives its research team the streams
// that the simulator's restricted key may read; the configuration lists
// them itself, as it does not import the simulator.
func TestDemoRestrictedFeedsAreTheRestrictedStreams(t *testing.T) {
	assert.Equal(t, RestrictedStreams(), feedid.Strings(config.DemoRestrictedFeeds()))
	assert.Equal(t, RestrictedStreams(), feedid.Strings(config.Default().Team(config.ResearchTeam).Feeds))
}
