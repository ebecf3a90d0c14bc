package config

import (
	"gopkg.in/yaml.v3"

	"streamgate/feedid"
)

// StreamIDs is a list of stream IDs in the configuration, as
// networks.*.upstream.ws_pinned and teams[].feeds give it. Decoding reads
// each item with feedid.Parse, the one grammar of stream IDs, and keeps its
// canonical (lower-case) form; an item Parse refuses (and a team's
// wildcard, AllFeedsWildcard) is kept as written, for Validate to name
// with its path and line. In a validated Config every item is a stream ID
// in canonical form, or a team's lone wildcard; IDs gives those that are
// IDs, for the packages that take them (auth, realtime).
type StreamIDs []feedid.ID

// UnmarshalYAML decodes a YAML sequence of stream IDs.
func (s *StreamIDs) UnmarshalYAML(n *yaml.Node) error {
	var items []string
	if err := n.Decode(&items); err != nil {
		return err
	}
	ids := make(StreamIDs, len(items))
	for i, item := range items {
		ids[i] = feedid.ID(item)
	}
	*s = ids.canonical()
	return nil
}

// IDs returns the items that are stream IDs, in canonical form, leaving
// out any other (a team's wildcard; none other in a validated Config).
func (s StreamIDs) IDs() []feedid.ID {
	ids := make([]feedid.ID, 0, len(s))
	for _, item := range s {
		if id, err := feedid.Parse(string(item)); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// canonical replaces every item that is a stream ID by its canonical form,
// in place, and returns s.
func (s StreamIDs) canonical() StreamIDs {
	for i, item := range s {
		if id, err := feedid.Parse(string(item)); err == nil {
			s[i] = id
		}
	}
	return s
}

// streamID reports a list item that is not a stream ID.
func (v *validator) streamID(item *feedid.ID) {
	if _, err := feedid.Parse(string(*item)); err != nil {
		v.add(item, "%q is not a stream ID (0x and 64 hex digits)", *item)
	}
}
