package wsgate

// FrameCounter counts the frames written to stream clients for the usage
// ledger (usage.Ledger): per network and team, the frames and their bytes
// with their frame headers. Frames must not block: it adds to a tally.
type FrameCounter interface {
	Frames(network, team string, frames int, bytes int64)
}

// batchBytes returns the bytes writeBatch writes for frames: each frame's
// payload and its header.
func batchBytes(frames [][]byte) int64 {
	var n int64
	var hdr [14]byte
	for _, f := range frames {
		n += int64(len(appendFrameHeader(hdr[:0], 0, len(f))) + len(f))
	}
	return n
}
