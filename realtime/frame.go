package realtime

import (
	"streamgate/don"
	"streamgate/feedid"
)

// feedIDLen is the length of a feed ID: 0x and 64 hex digits.
const feedIDLen = feedid.Len

// parseFrame finds the feed ID and the observationsTimestamp of one report
// frame, {"report":{"feedID":"0x…",…,"observationsTimestamp":N}}, as the
// frame's check reads them (don.FrameKey: the record's own keys, the
// reading every report entering the gateway gets), so that a frame is
// filed under the stream and second that its check verified and its
// clients read, never under a "feedID" found elsewhere in the frame. A
// frame repeating a key is filed under the first, and refused by the
// check (the network's Gate, in every mode). The feed ID is returned as a
// slice of frame (no copy) when it is in canonical (lower-case) form, as
// the upstream writes it; in another case, as a canonical copy.
func parseFrame(frame []byte) (feed []byte, ts int64, ok bool) {
	return frameKey(frame, don.FrameKey)
}

// deliveredFrame is parseFrame for a frame the hub has parsed already
// (one taken from a subscription's queue): the same answer, without the
// frame's syntax checked again (don.AcceptedFrameKey), since it is read
// once per frame per client.
func deliveredFrame(frame []byte) (feed []byte, ts int64, ok bool) {
	return frameKey(frame, don.AcceptedFrameKey)
}

func frameKey(frame []byte, key func([]byte) ([]byte, int64, bool)) (feed []byte, ts int64, ok bool) {
	feed, ts, ok = key(frame)
	if !ok || len(feed) != feedIDLen || !feedid.Valid(feed) || ts < 0 {
		return nil, 0, false
	}
	if !feedid.Canonical(feed) {
		feed = []byte(feedid.Canon(string(feed)))
	}
	return feed, ts, true
}

// FrameTime returns the feed ID (in canonical form) and the
// observationsTimestamp of a report frame the hub delivered, as the hub
// read them; ok is false for a frame that is not a report.
func FrameTime(frame []byte) (feed feedid.ID, observationsTimestamp int64, ok bool) {
	id, ts, ok := deliveredFrame(frame)
	if !ok {
		return "", 0, false
	}
	return feedid.ID(id), ts, true
}

// validFeedID reports whether id is a stream ID in canonical form: what
// the hub keys its feeds by.
func validFeedID[T ~string | ~[]byte](id T) bool { return feedid.Canonical(id) }
