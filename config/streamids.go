package config

import (
	"gopkg.in/yaml.v3"

	"streamgate/feedid"
)

// StreamIDs is a list of stream IDs in the configuration, as
// networks.*.upstream.ws_pinned gives it. Decoding reads each item with
// feedid.Parse, the one grammar of stream IDs, and keeps its canonical
// (lower-case) form; an item Parse refuses is kept as written, for Validate
// to name with its path and line. The items are strings so that the APIs
// that take stream IDs as strings accept the list as it is; IDs gives them
// typed.
type StreamIDs []string

// UnmarshalYAML decodes a YAML sequence of stream IDs.
func (s *StreamIDs) UnmarshalYAML(n *yaml.Node) error {
	var items []string
	if err := n.Decode(&items); err != nil {
		return err
	}
	*s = canonicalIDs(items)
	return nil
}

// IDs returns the list as feedid.IDs, leaving out any item that is not a
// stream ID (none in a validated Config).
func (s StreamIDs) IDs() []feedid.ID {
	ids := make([]feedid.ID, 0, len(s))
	for _, item := range s {
		if id, err := feedid.Parse(item); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// canonicalIDs replaces every item of items that is a stream ID by its
// canonical form, in place, and returns items.
func canonicalIDs(items []string) []string {
	for i, item := range items {
		if id, err := feedid.Parse(item); err == nil {
			items[i] = id.String()
		}
	}
	return items
}

// streamID reports a list item that is not a stream ID.
func (v *validator) streamID(item *string) {
	if _, err := feedid.Parse(*item); err != nil {
		v.add(item, "%q is not a stream ID (0x and 64 hex digits)", *item)
	}
}
