package wsgate

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"streamgate/feedid"
	"streamgate/realtime/share"
)

// The resume records' keys are those every release has written (an
// upgrade must not lose records), below the stream side's prefix that the
// hubs' sharing keys start with too, and apart from them.
func TestResumeKeys(t *testing.T) {
	id := resumeID("mainnet", "key-1", "", []feedid.ID{"0x02", "0x01"})
	assert.Equal(t, "streamgate:ws:v1:resume:72a7753289d34beecd808b277fd28ab0", resumeKey(id),
		"the key of a record is its identity's SHA-256, 16 bytes in hex, as before")
	assert.NotContains(t, resumeKey(id), "key-1", "no key ID appears in Redis")

	assert.True(t, strings.HasPrefix(share.DefaultPrefix, streamKeyPrefix),
		"realtime's sharing keys start with the stream side's prefix")
	assert.False(t, strings.HasPrefix(resumeKeyPrefix, share.DefaultPrefix),
		"a resume record is never one of the sharing keys")
	assert.False(t, strings.HasPrefix(share.DefaultPrefix, resumeKeyPrefix),
		"nor a sharing key a resume record")
}
