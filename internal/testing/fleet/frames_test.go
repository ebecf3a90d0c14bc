package fleet

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FrameFields reads the two fields the clients need as encoding/json
// does, and refuses a frame without them.
func TestFrameFields(t *testing.T) {
	feed := "0x" + strings.Repeat("0a", 32)
	b, err := json.Marshal(map[string]any{"report": map[string]any{
		"feedID": feed, "validFromTimestamp": 1795469612, "observationsTimestamp": 1795469613, "fullReport": "0x00",
	}})
	require.NoError(t, err)
	var h frameDoc
	require.NoError(t, json.Unmarshal(b, &h))
	got, ts, err := FrameFields(b)
	require.NoError(t, err)
	assert.Equal(t, h.Report.FeedID, string(got))
	assert.Equal(t, h.Report.ObservationsTimestamp, ts)
	for _, bad := range []string{`{}`, `{"report":{"feedID":"0x`, `{"report":{"feedID":"0x1"}}`, `{"report":{"feedID":"0x1","observationsTimestamp":"x"}}`} {
		_, _, err := FrameFields([]byte(bad))
		assert.Error(t, err, bad)
	}
}

type frameDoc struct {
	Report struct {
		FeedID                string `json:"feedID"`
		ObservationsTimestamp int64  `json:"observationsTimestamp"`
	} `json:"report"`
}

// FuzzFrameFields: on any input FrameFields does not panic, and what it
// accepts from a compact report frame is what encoding/json reads.
func FuzzFrameFields(f *testing.F) {
	f.Add([]byte(`{"report":{"feedID":"0x0003","observationsTimestamp":1795469613}}`))
	f.Add([]byte(`{"report":{"feedID":"0x","observationsTimestamp":-1}}`))
	f.Add([]byte(`"feedID":"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		feed, ts, err := FrameFields(b)
		if err != nil {
			return
		}
		var h frameDoc
		if json.Unmarshal(b, &h) != nil || strings.Count(string(b), `"feedID"`) != 1 || strings.Count(string(b), `"observationsTimestamp"`) != 1 {
			return // not a report frame as the upstream writes it
		}
		if !strings.Contains(string(b), `"report":{"feedID":"`) || strings.ContainsAny(string(feed), `\`) || !utf8.Valid(feed) {
			return // stream IDs are hex: no escapes, no bytes that are not UTF-8
		}
		assert.Equal(t, h.Report.FeedID, string(feed))
		assert.Equal(t, h.Report.ObservationsTimestamp, ts)
	})
}
