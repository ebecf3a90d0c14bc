package realtime

// The frame as the hub reads it: once, at its entry (Hub.deliverFrame for
// a frame of an upstream connection or of another replica, the
// backfiller's fetch for a frame of a gap or a resume), then carried as
// one *Frame through continuity, the subscriptions' queues and the client
// writer, which never read the bytes again.

import (
	"math"

	"go.uber.org/zap"

	"streamgate/don"
	"streamgate/feedid"
)

// feedIDLen is the length of a feed ID: 0x and 64 hex digits.
const feedIDLen = feedid.Len

// Frame is one report frame as the hub delivers it: the upstream's bytes,
// unchanged ({"report":{…}}: what the clients receive and REST latest
// answers), and what the hub read of them at its entry. A *Frame is
// shared by every subscriber, the history and the newest report of its
// stream: never modify it.
type Frame struct {
	// Stream is the record's feedID, in canonical form.
	Stream feedid.ID
	// ObservationsTimestamp and ValidFromTimestamp are the record's (0
	// when the record lacks validFromTimestamp).
	ObservationsTimestamp int64
	ValidFromTimestamp    int64
	// Bytes is the frame as the upstream sent it.
	Bytes []byte
	// Follows is set only in the copy handed to Config.Frames: the
	// observationsTimestamp of the stream's report handed just before this
	// one when this one is the next second (ObservationsTimestamp-1), so
	// that the hub's continuity guarantees that nothing was missed
	// between; 0 when it does not (the first frame after the stream is
	// carried, or after a jump: a gap's seconds counted unfilled, cut by
	// BackfillMax or answered "none", which REST's 206 does not make
	// certain; after Recheck dropped the stream's newest report). The
	// frames kept by the hub (history, newest) always have 0.
	Follows int64
}

// readFrame reads the stream and the times of one report frame,
// {"report":{"feedID":"0x…",…,"observationsTimestamp":N}}, as the
// frame's check reads them (don.FrameFields: the record's own keys, the
// reading every report entering the gateway gets), so that a frame is
// filed under the stream and second that its check verified and its
// clients read, never under a "feedID" found elsewhere in the frame. A
// frame repeating a key is filed under the first, and refused by the
// check (the network's Gate, in every mode). ok is false for a frame
// that is not JSON or not a report.
func readFrame(b []byte) (*Frame, bool) {
	feed, validFrom, ts, ok := don.FrameFields(b)
	if !ok || len(feed) != feedIDLen || !feedid.Valid(feed) || ts < 0 {
		return nil, false
	}
	return &Frame{Stream: feedid.ID(feedid.Canon(string(feed))), ObservationsTimestamp: ts,
		ValidFromTimestamp: validFrom, Bytes: b}, true
}

// parseFrame is readFrame's stream (canonical) and observationsTimestamp.
func parseFrame(b []byte) (feed []byte, ts int64, ok bool) {
	f, ok := readFrame(b)
	if !ok {
		return nil, 0, false
	}
	return []byte(f.Stream), f.ObservationsTimestamp, true
}

// validFeedID reports whether id is a stream ID in canonical form: what
// the hub keys its feeds by.
func validFeedID[T ~string | ~[]byte](id T) bool { return feedid.Canonical(id) }

// originShared marks the frames received from another replica in logs.
const originShared = "shared"

// deliverFrame hands one frame, delivered by src, to the subscribers of
// its feed, if the feed's continuity takes it (see continuity.take).
func (h *Hub) deliverFrame(origin string, src source, b []byte) {
	frame, ok := readFrame(b)
	if !ok {
		h.log.Warn("upstream frame without feedID or observationsTimestamp", zap.String("origin", origin), zap.Int("bytes", len(b)))
		return
	}
	ts := frame.ObservationsTimestamp
	if h.cont.future(ts, origin) {
		return
	}
	f := (*h.feeds.Load())[frame.Stream]
	if f == nil {
		return // no longer wanted
	}
	// The feed's own ID, the same string in every frame of the stream
	// (the one read is the frame's own copy): what a frame is kept by
	// holds one ID per stream, not one per frame, and a consumer that
	// keeps something per stream finds it by the string's address
	// (wsgate's resume marks).
	frame.Stream = f.id
	f.mu.Lock()
	if !h.cont.take(f, frame, src) {
		f.mu.Unlock()
		return
	}
	n, slow := f.fanOut([]histFrame{{ts, frame}})
	f.mu.Unlock()
	h.mx.fannedOut(n, slow)
}

// Latest returns the newest report frame the hub holds for feed (the
// upstream's bytes: exactly the JSON {"report":{...}} that REST latest
// answers) and its observationsTimestamp, only while the upstream
// connection that delivered it has stayed up since (or was replaced
// make-before-break by one that is still up); ok is false otherwise, and
// when feed is not streamed. Lock-free; each answer with ok true is
// counted (streamgate_ws_latest_served_total).
func (h *Hub) Latest(feed feedid.ID) (frame []byte, observationsTimestamp int64, ok bool) {
	return h.LatestSince(feed, math.MinInt64)
}

// LatestSince is Latest, but ok is false too when the newest report held
// was observed before oldest (Unix seconds): while the connection is up but
// silent (a stall not yet detected), a caller bounds how old a report it
// answers.
func (h *Hub) LatestSince(feed feedid.ID, oldest int64) (frame []byte, observationsTimestamp int64, ok bool) {
	f := (*h.feeds.Load())[feed]
	if f == nil {
		return nil, 0, false
	}
	l := f.latest.Load()
	if l == nil || !l.src.Valid() || l.ts < oldest {
		return nil, 0, false
	}
	h.st.latestServed.Add(1)
	h.mx.latestServed.Inc()
	return l.frame.Bytes, l.ts, true
}
