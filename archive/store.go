package archive

import (
	"context"
	"errors"
	"fmt"

	"streamgate/feedid"
)

// Store is the archive's storage: Pebble (OpenPebble) or PostgreSQL
// (OpenPostgres), alike in every answer. Networks are kept apart: a
// report, a span, a count of one network is never another's. Its methods
// are safe for concurrent use.
type Store interface {
	// Write stores the reports not stored yet: a (network, stream,
	// observationsTimestamp) already there, or earlier in reports, is a
	// duplicate, skipped and counted. The first stored wins and is never
	// overwritten. A report that cannot be stored (no network, a stream ID
	// not canonical, no fullReport) fails the whole call before anything
	// is written.
	Write(ctx context.Context, reports []Report) (WriteResult, error)
	// Get returns the report of stream at observationsTimestamp ts, and
	// whether there is one.
	Get(ctx context.Context, network string, stream feedid.ID, ts uint32) (Report, bool, error)
	// Page returns up to limit reports of stream in ascending
	// observationsTimestamp, from start inclusive (as /api/v1/reports/page:
	// the next page starts at the last one's observationsTimestamp + 1).
	Page(ctx context.Context, network string, stream feedid.ID, start uint32, limit int) ([]Report, error)
	// At returns the reports of streams at observationsTimestamp ts that
	// are stored, in the order of streams (for bulk).
	At(ctx context.Context, network string, streams []feedid.ID, ts uint32) ([]Report, error)
	// AddCoverage records that the archive holds every report of stream
	// the upstream has in span, merged with the stored spans it overlaps
	// or touches.
	AddCoverage(ctx context.Context, network string, stream feedid.ID, span Span) error
	// Coverage returns the stream's spans that intersect [from, to], in
	// ascending order, whole (not cut to [from, to]).
	Coverage(ctx context.Context, network string, stream feedid.ID, from, to uint32) ([]Span, error)
	// DeleteBefore deletes every report whose observationsTimestamp is
	// before cutoff, in every network, and the coverage of those seconds
	// (a span across cutoff keeps [cutoff, To]).
	DeleteBefore(ctx context.Context, cutoff uint32) (Deleted, error)
	// Stats counts what the store holds.
	Stats(ctx context.Context) (Stats, error)
	// Streams returns every stream of network the store holds a report
	// or a coverage span of, in ascending order of the stream ID's bytes,
	// each with its oldest and newest report and its coverage.
	Streams(ctx context.Context, network string) ([]StreamInfo, error)
	// Close releases the store; it must not be used afterwards.
	Close() error
}

// WriteResult is what one Write did.
type WriteResult struct {
	Written    int // reports stored
	Duplicates int // reports skipped: stored already, or repeated in the call
}

// Deleted is what one DeleteBefore removed.
type Deleted struct {
	Reports int64 // reports deleted
	Spans   int64 // coverage spans deleted or cut
}

// Stats is what a store holds.
type Stats struct {
	Reports     int64 // reports stored
	BytesOnDisk int64 // Pebble: the directory's files; PostgreSQL: the tables and their indexes
	Spans       int64 // coverage spans
}

// StreamInfo is what a store holds of one stream of a network.
type StreamInfo struct {
	Stream feedid.ID `json:"feedID"`
	// Reports is false when the stream has coverage but no report (a
	// span in which the upstream has none); First and Last are then 0.
	Reports bool `json:"reports"`
	// First and Last are the observationsTimestamp of the oldest and
	// newest report held.
	First uint32 `json:"first"`
	Last  uint32 `json:"last"`
	// Spans and Covered are the coverage: its spans, and the seconds they
	// hold.
	Spans   int64  `json:"coverage_spans"`
	Covered uint64 `json:"covered_seconds"`
}

// Span is a span of seconds [From, To], both inclusive.
type Span struct {
	From, To uint32
}

// String returns [From, To].
func (s Span) String() string { return fmt.Sprintf("[%d, %d]", s.From, s.To) }

// ErrBadSpan is returned by AddCoverage for a span whose From is after its
// To.
var ErrBadSpan = errors.New("archive: a span's From is after its To")

// touches reports whether a and b overlap or are adjacent.
func touches(a, b Span) bool {
	return uint64(a.From) <= uint64(b.To)+1 && uint64(b.From) <= uint64(a.To)+1
}

// Covered reports whether the store's coverage of stream holds every
// second of [a, b].
func Covered(ctx context.Context, s Store, network string, stream feedid.ID, a, b uint32) (bool, error) {
	if a > b {
		return false, ErrBadSpan
	}
	spans, err := s.Coverage(ctx, network, stream, a, b)
	if err != nil {
		return false, err
	}
	// Stored spans are merged: [a, b] is covered only by a single span.
	for _, sp := range spans {
		if sp.From <= a && sp.To >= b {
			return true, nil
		}
	}
	return false, nil
}

// checkAll checks every report before a write.
func checkAll(reports []Report) error {
	for i := range reports {
		if err := reports[i].check(); err != nil {
			return err
		}
	}
	return nil
}

// checkQuery checks a query's network and stream.
func checkQuery(network string, stream feedid.ID) ([32]byte, error) {
	if !validNetwork(network) {
		return [32]byte{}, fmt.Errorf("archive: network %q is not a network name", network)
	}
	return streamBytes(stream)
}

// StreamSpan is a span of one stream's coverage, for AddCoverages.
type StreamSpan struct {
	Network string
	Stream  feedid.ID
	Span    Span
}

// CoverageBatcher is a store that records many spans at once, cheaper
// than an AddCoverage each (Pebble: one synced write). The Writer's
// recording of the stream's claims uses it where the store has it.
type CoverageBatcher interface {
	// AddCoverages is AddCoverage for each span, in order, as one write:
	// every span is recorded, or (an error) none.
	AddCoverages(ctx context.Context, spans []StreamSpan) error
}

// StreamRef names a stream of a network.
type StreamRef struct {
	Network string
	Stream  feedid.ID
}

// StreamLister is a store that lists the streams whose coverage reaches
// a second, of every network: what the HoleFiller's sweep looks at.
type StreamLister interface {
	// CoveredStreams returns every (network, stream) with a coverage
	// span ending at since or after, ordered by network, then by the
	// stream ID's bytes.
	CoveredStreams(ctx context.Context, since uint32) ([]StreamRef, error)
}
