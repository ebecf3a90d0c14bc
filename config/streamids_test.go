package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"streamgate/feedid"
)

// Stream IDs in ws_pinned and a team's feeds are read by feedid.Parse at
// load: any case is accepted and kept in canonical form; an item that is
// not a stream ID is named with its path and line, as written.
func TestStreamIDsLoad(t *testing.T) {
	upper := "0X" + strings.ToUpper(feedA[2:])
	doc := func(pinned, feed string) string {
		return "networks:\n  mainnet:\n    listen: \":8080\"\n    upstream:\n      ws_pinned: [\"" + pinned + "\"]\n" +
			"teams:\n  - {name: t, networks: [mainnet], feeds: [\"" + feed + "\"], keys: [{id: k, secret: " + okKey + "}]}\n"
	}
	cfg, err := Parse([]byte(doc(upper, upper)), nil)
	require.NoError(t, err)
	pinned := cfg.Network("mainnet").Upstream.WSPinned
	assert.Equal(t, StreamIDs{feedA}, pinned)
	assert.Equal(t, []feedid.ID{feedA}, pinned.IDs())
	assert.Equal(t, StreamIDs{feedA}, cfg.Teams[0].Feeds)

	_, err = Parse([]byte(doc("0xAB", "0xCD")), nil)
	require.Error(t, err)
	assert.Equal(t, `networks.mainnet.upstream.ws_pinned[0]: "0xAB" is not a stream ID (0x and 64 hex digits) (line 5)`+"\n"+
		`teams[0].feeds[0]: "0xCD" is not a stream ID (0x and 64 hex digits) (line 7)`, err.Error())

	_, err = Parse([]byte("networks:\n  mainnet:\n    listen: \":8080\"\n    upstream:\n      ws_pinned: {a: b}\n"), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "line 5: cannot unmarshal !!map into []string", "a value of the wrong type is a decoding problem")
}

// FuzzStreamIDs: decoding a YAML document as StreamIDs succeeds exactly when
// decoding it as []string does, with as many items, each the canonical form
// of a stream ID or, for anything else, the item as written.
func FuzzStreamIDs(f *testing.F) {
	f.Add("[" + feedA + "]")
	f.Add("- " + strings.ToUpper(feedA) + "\n- \"*\"\n- 0x12\n")
	f.Add("[1, true, ~]")
	f.Add("{a: b}")
	f.Fuzz(func(t *testing.T, doc string) {
		var ids StreamIDs
		var raw []string
		err := yaml.Unmarshal([]byte(doc), &ids)
		rawErr := yaml.Unmarshal([]byte(doc), &raw)
		if (err == nil) != (rawErr == nil) {
			t.Fatalf("%q: StreamIDs %v, []string %v", doc, err, rawErr)
		}
		if err != nil {
			return
		}
		if len(ids) != len(raw) {
			t.Fatalf("%q: %d items, want %d", doc, len(ids), len(raw))
		}
		for i, item := range raw {
			id, perr := feedid.Parse(item)
			switch {
			case perr == nil && ids[i] != id:
				t.Fatalf("%q: item %d is %q, want %q", doc, i, ids[i], id)
			case perr != nil && ids[i] != feedid.ID(item):
				t.Fatalf("%q: item %d is %q, want it as written, %q", doc, i, ids[i], item)
			}
		}
		if len(ids.IDs()) > len(ids) {
			t.Fatalf("%q: more IDs than items", doc)
		}
	})
}
