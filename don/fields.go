package don

// SchemaFields returns the fields of schema s in order, with their
// Solidity types and scaling and no values; nil for an unknown schema.
// It is what a reader of many reports of one schema (an export's
// columns, a candle's field) needs to know before the first report.
func SchemaFields(s Schema) []Field {
	sc, ok := schemas[s]
	if !ok {
		return nil
	}
	out := make([]Field, len(sc.fields))
	for i, fd := range sc.fields {
		out[i] = Field{Name: fd.name, Type: fd.typ, Scaled: fd.scaled}
	}
	return out
}
