package realtime

import "bytes"

var (
	keyFeedID = []byte(`"feedID":"`)
	keyObsTS  = []byte(`"observationsTimestamp":`)
)

// feedIDLen is the length of a feed ID: 0x and 64 hex digits.
const feedIDLen = 66

// parseFrame finds the feed ID and the observationsTimestamp of one report
// frame, {"report":{"feedID":"0x…",…,"observationsTimestamp":N}}, without
// decoding the JSON: two searches and a loop over the digits. The upstream
// writes both fields without spaces around the colon. The feed ID is
// returned as a slice of frame (no copy).
func parseFrame(frame []byte) (feed []byte, ts int64, ok bool) {
	i := bytes.Index(frame, keyFeedID)
	if i < 0 || len(frame) < i+len(keyFeedID)+feedIDLen+1 {
		return nil, 0, false
	}
	feed = frame[i+len(keyFeedID) : i+len(keyFeedID)+feedIDLen]
	if frame[i+len(keyFeedID)+feedIDLen] != '"' || !validFeedID(feed) {
		return nil, 0, false
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

// FrameTime returns the feed ID (a slice of frame) and the
// observationsTimestamp of a report frame, as the hub reads them; ok is
// false for a frame that is not a report.
func FrameTime(frame []byte) (feed []byte, observationsTimestamp int64, ok bool) {
	return parseFrame(frame)
}

// validFeedID reports whether id is 0x and 64 lower-case hex digits.
func validFeedID[T string | []byte](id T) bool {
	if len(id) != feedIDLen || id[0] != '0' || id[1] != 'x' {
		return false
	}
	for i := 2; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
