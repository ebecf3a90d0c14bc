package cache

// Kind is a kind of entry whose parsed value has the type V: a catalog
// view indexed for filtering, a latest report's observation time, a bulk
// chunk's split reports. A kind is declared once, with its type, where its
// entries are made; Value and With are the only ways to an entry's value,
// so no call site asserts a type of its own.
type Kind[V any] struct {
	// Cost is what a value holds in memory, in bytes, counted against the
	// Store's MaxBytes with the entry (nil: nothing beyond the entry).
	Cost func(v V, e *Entry) int64
}

// Value returns e's value and whether e has one of this kind.
func (Kind[V]) Value(e *Entry) (V, bool) {
	v, ok := e.value.(V)
	return v, ok
}

// With sets e's value to v (and its cost), before e is handed to the Store.
func (k Kind[V]) With(e *Entry, v V) *Entry {
	e.value = v
	if k.Cost != nil {
		e.valueCost = k.Cost(v, e)
	}
	return e
}
