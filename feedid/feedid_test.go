package feedid_test

import (
	"encoding/json"
	"strings"
	"testing"

	"streamgate/feedid"
)

const lower = "0x00030a92e5497ef511ec2966ed19b6b2403c92c21209047af66946bece4e6d28"

func TestParse(t *testing.T) {
	for _, in := range []string{lower, strings.ToUpper(lower[:2]) + lower[2:], "0x" + strings.ToUpper(lower[2:]), "0X" + strings.ToUpper(lower[2:])} {
		id, err := feedid.Parse(in)
		if err != nil || id.String() != lower {
			t.Errorf("%q: %q, %v", in, id, err)
		}
		if !feedid.Valid(in) || !feedid.Valid([]byte(in)) {
			t.Errorf("%q not valid", in)
		}
		if feedid.Canonical(in) != (in == lower) {
			t.Errorf("%q canonical: %v", in, feedid.Canonical(in))
		}
	}
	for _, bad := range []string{"", "0x", lower[:65], lower + "0", "1x" + lower[2:], "0x" + strings.Repeat("g", 64), lower[2:] + "00"} {
		if _, err := feedid.Parse(bad); err == nil || feedid.Valid(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParse: Parse accepts exactly what Valid does, its result is
// canonical, and Canon of an accepted ID is that result.
func FuzzParse(f *testing.F) {
	f.Add(lower)
	f.Add(strings.ToUpper(lower))
	f.Add("0xZZ")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := feedid.Parse(s)
		if (err == nil) != feedid.Valid(s) {
			t.Fatalf("%q: Parse %v, Valid %v", s, err, feedid.Valid(s))
		}
		if err != nil {
			return
		}
		if !feedid.Canonical(string(id)) || feedid.Canon(s) != string(id) || !strings.EqualFold(s, string(id)) {
			t.Fatalf("%q parsed as %q", s, id)
		}
	})
}

// An ID decodes from text (JSON here) through Parse: canonical, or an
// error that names the input.
func TestUnmarshalText(t *testing.T) {
	var ids []feedid.ID
	if err := json.Unmarshal([]byte(`["0X`+strings.ToUpper(lower[2:])+`", "`+lower+`"]`), &ids); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 || ids[0] != lower || ids[1] != lower {
		t.Fatalf("decoded %q", ids)
	}
	out, err := json.Marshal(ids)
	if err != nil || string(out) != `["`+lower+`","`+lower+`"]` {
		t.Fatalf("encoded %s, %v", out, err)
	}
	var id feedid.ID
	err = json.Unmarshal([]byte(`"0x12"`), &id)
	if err == nil || !strings.Contains(err.Error(), `feedid: "0x12" is not a stream ID`) || id != "" {
		t.Fatalf("0x12: %q, %v", id, err)
	}
}

// ParseAll reads every item with Parse, or refuses the list with the
// first item that is not a stream ID; Strings gives the canonical forms
// back as text.
func TestParseAll(t *testing.T) {
	ids, err := feedid.ParseAll([]string{strings.ToUpper(lower), lower})
	if err != nil || len(ids) != 2 || ids[0] != lower || ids[1] != lower {
		t.Fatalf("parsed %q, %v", ids, err)
	}
	if got := feedid.Strings(ids); len(got) != 2 || got[0] != lower || got[1] != lower {
		t.Fatalf("strings %q", got)
	}
	ids, err = feedid.ParseAll([]string{lower, "0x12", "*"})
	if err == nil || !strings.Contains(err.Error(), `"0x12"`) || ids != nil {
		t.Fatalf("0x12: %q, %v", ids, err)
	}
}
