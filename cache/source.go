package cache

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"

	"streamgate/tracing"
)

// Check validates an entry read from the shared tier for one kind of key
// and rebuilds its parsed value (an entry's value is never stored there)
// from its Body: it is the kind's codec. An error means the entry must not
// be served: the tier drops it and counts it as corrupt.
type Check func(e *Entry) error

// Tier is the second tier behind a Store's memory (cache/shared's Tier):
// FillAfter returns the entry of key from the tier, else from fill under
// the key's lease (and writes it to the tier), else from the replica
// holding the lease; for the first grace it only looks.
type Tier interface {
	FillAfter(ctx context.Context, key string, check Check, grace time.Duration, fill FillFunc) (*Entry, error)
}

// Source says how LoadFrom obtains an entry that memory does not hold
// fresh: the shared tier first (when the Store has one and Check is set),
// then Fill, the origin.
type Source struct {
	// Fill produces the entry from the origin (the upstream).
	Fill FillFunc
	// Check is the codec of the key's kind in the shared tier; nil keeps
	// the key out of the tier (memory, then Fill).
	Check Check
	// Grace is how long the tier only looks for another replica's entry
	// before it takes the key's lease (Tier.FillAfter).
	Grace time.Duration
	// NotInMemory marks a key whose entries answer the callers waiting
	// for them and may go to the shared tier, but are never kept in
	// memory (a bulk chunk's flight).
	NotInMemory bool
}

// LoadFrom is Load for a key the replicas may share: a fresh entry in
// memory is returned at once and never reaches the tier; on a miss (or the
// refresh of a stale entry) the flight asks the shared tier, which runs
// src.Fill only when no replica holds the entry, and the Store keeps
// whatever came back, from the tier or the origin, in memory. This is the
// one place where the tiers are wired, as groupcache's Group.load does
// memory, then peer, then origin.
func (s *Store) LoadFrom(ctx context.Context, key string, src Source) (*Entry, Outcome, error) {
	if e, st := s.Get(key); st == Fresh {
		return e, Hit, nil // without making the flight's fill
	}
	return s.Load(ctx, key, s.origin(key, src))
}

// origin is the fill a flight of src runs: through the tier when there is
// one and the key is shared, else src.Fill itself.
func (s *Store) origin(key string, src Source) FillFunc {
	fill := src.Fill
	if s.tier != nil && src.Check != nil {
		fill = func(ctx context.Context) (*Entry, error) {
			ctx, span := tracing.Start(ctx, "shared tier")
			e, err := s.tier.FillAfter(ctx, key, src.Check, src.Grace, src.Fill)
			if err != nil && span.IsRecording() {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
			return e, err
		}
	}
	if !src.NotInMemory {
		return fill
	}
	return func(ctx context.Context) (*Entry, error) {
		e, err := fill(ctx)
		if err != nil || e.NoStore {
			return e, err
		}
		kept := *e // the tier has written it; memory does not keep it
		kept.NoStore = true
		return &kept, nil
	}
}
