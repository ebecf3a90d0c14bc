package don_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"

	"streamgate/don"
)

// TestSchemaFields: for every schema, the fields a decoded report has,
// in order, with their types and scaling, and nil for an unknown one.
func TestSchemaFields(t *testing.T) {
	known := 0
	for v := range 64 {
		s := don.Schema(v)
		got := don.SchemaFields(s)
		if don.FieldNames(s) == nil {
			assert.Nil(t, got, "%s", s)
			continue
		}
		known++
		assert.Equal(t, don.FieldNames(s), names(got), "%s", s)
		for _, f := range got {
			assert.NotEmpty(t, f.Type, "%s %s", s, f.Name)
			assert.Nil(t, f.Value)
		}
	}
	assert.Equal(t, 14, known, "V1 to V14")
	assert.Nil(t, don.SchemaFields(don.Schema(0xffff)))

	// And as real reports decode: the same names, types and scaling.
	b, err := os.ReadFile("testdata/real-testnet-reports.json")
	if err != nil {
		t.Fatal(err)
	}
	var data realTestnet
	if err := json.Unmarshal(b, &data); err != nil {
		t.Fatal(err)
	}
	fulls := []string{loadReal(t).FullReport}
	for _, r := range data.Reports {
		fulls = append(fulls, r.FullReport)
	}
	for _, full := range fulls {
		s, fields, err := don.DecodeFullReport(full)
		if err != nil {
			t.Fatal(err)
		}
		want := don.SchemaFields(s)
		assert.Len(t, fields, len(want))
		for i := range min(len(fields), len(want)) {
			f := fields[i]
			f.Value = nil
			assert.Equal(t, want[i], f, "%s field %d", s, i)
		}
	}
}

func names(fs []don.Field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.Name
	}
	return out
}
