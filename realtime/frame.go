package realtime

import (
	"bytes"

	"streamgate/feedid"
)

var (
	keyFeedID = []byte(`"feedID":"`)
	keyObsTS  = []byte(`"observationsTimestamp":`)
)

// feedIDLen is the length of a feed ID: 0x and 64 hex digits.
const feedIDLen = feedid.Len

// parseFrame finds the feed ID and the observationsTimestamp of one report
// frame, {"report":{"feedID":"0x…",…,"observationsTimestamp":N}}, without
// decoding the JSON: two searches and a loop over the digits. The upstream
// writes both fields without spaces around the colon. The feed ID is
// returned as a slice of frame (no copy) when it is in canonical
// (lower-case) form, as the upstream writes it; in another case, as a
// canonical copy.
func parseFrame(frame []byte) (feed []byte, ts int64, ok bool) {
	i := bytes.Index(frame, keyFeedID)
	if i < 0 || len(frame) < i+len(keyFeedID)+feedIDLen+1 {
		return nil, 0, false
	}
	feed = frame[i+len(keyFeedID) : i+len(keyFeedID)+feedIDLen]
	if frame[i+len(keyFeedID)+feedIDLen] != '"' || !feedid.Valid(feed) {
		return nil, 0, false
	}
	if !feedid.Canonical(feed) {
		feed = []byte(feedid.Canon(string(feed)))
	}
	j := bytes.Index(frame, keyObsTS)
	if j < 0 {
		return nil, 0, false
	}
	j += len(keyObsTS)
	n := 0
	for ; j < len(frame) && frame[j] >= '0' && frame[j] <= '9'; j++ {
		if n >= 18 {
			return nil, 0, false
		}
		ts = ts*10 + int64(frame[j]-'0')
		n++
	}
	if n == 0 {
		return nil, 0, false
	}
	return feed, ts, true
}

// FrameTime returns the feed ID (in canonical form) and the
// observationsTimestamp of a report frame, as the hub reads them; ok is
// false for a frame that is not a report.
func FrameTime(frame []byte) (feed feedid.ID, observationsTimestamp int64, ok bool) {
	id, ts, ok := parseFrame(frame)
	if !ok {
		return "", 0, false
	}
	return feedid.ID(id), ts, true
}

// validFeedID reports whether id is a stream ID in canonical form: what
// the hub keys its feeds by.
func validFeedID[T ~string | ~[]byte](id T) bool { return feedid.Canonical(id) }
