package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// ReadFrames reads c's frames until it ends, handing each frame's stream
// ID and observationsTimestamp to fn with its arrival time in Unix
// nanoseconds (feed is valid during the call only). It returns the error
// that ended the connection, or the frame that is not a report (as the Go
// SDK closes on a frame it cannot read). Each frame is read into one
// reused buffer and the two fields are picked out of the JSON without
// decoding it: at 10000 frames a second, allocating and decoding each
// would be most of a load tool's CPU, and would be counted in the delay
// it measures.
func ReadFrames(ctx context.Context, c *websocket.Conn, fn func(feed []byte, ts, at int64)) error {
	buf := make([]byte, 0, 4096)
	for {
		_, r, err := c.Reader(ctx)
		if err != nil {
			return err
		}
		at := time.Now().UnixNano()
		buf = buf[:0]
		for err == nil {
			if len(buf) == cap(buf) {
				buf = append(buf, 0)[:len(buf)]
			}
			var n int
			n, err = r.Read(buf[len(buf):cap(buf)])
			buf = buf[:len(buf)+n]
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		feed, ts, err := FrameFields(buf)
		if err != nil {
			return err
		}
		fn(feed, ts, at)
	}
}

var (
	feedField = []byte(`"feedID":"`)
	tsField   = []byte(`"observationsTimestamp":`)
)

// FrameFields returns the feedID and observationsTimestamp of a report
// frame as the upstream writes it (compact JSON, each field once).
func FrameFields(b []byte) (feed []byte, ts int64, err error) {
	i := bytes.Index(b, feedField)
	if i < 0 {
		return nil, 0, fmt.Errorf("a frame without feedID: %.80q", b)
	}
	feed = b[i+len(feedField):]
	j := bytes.IndexByte(feed, '"')
	if j < 0 {
		return nil, 0, fmt.Errorf("a frame with an unterminated feedID: %.80q", b)
	}
	feed = feed[:j]
	k := bytes.Index(b, tsField)
	if k < 0 {
		return nil, 0, fmt.Errorf("a frame without observationsTimestamp: %.80q", b)
	}
	digits := b[k+len(tsField):]
	n := 0
	for n < len(digits) && digits[n] >= '0' && digits[n] <= '9' {
		n++
	}
	ts, err = strconv.ParseInt(string(digits[:n]), 10, 64)
	if err != nil {
		return nil, 0, fmt.Errorf("a frame's observationsTimestamp: %w", err)
	}
	return feed, ts, nil
}
