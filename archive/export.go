package archive

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/hex"
	"fmt"
	"io"
	"math/big"
	"strconv"

	"streamgate/don"
	"streamgate/feedid"
)

// The formats of Export.
const (
	ExportJSONLines = "jsonl" // one report per line: its record and its decoded view
	ExportCSV       = "csv"   // one report per row: its times, its decoded fields, its fullReport
)

// ExportPage is how many reports Export reads from the store at a time.
const ExportPage = 1000

// Export writes the reports of stream in [from, to] of network to w in
// ascending observationsTimestamp, as format, for research and audit:
//
//   - jsonl: one line per report, its record as the upstream sent it (the
//     fullReport, which carries the DON's signatures, included) with the
//     decoded view's "decoded" and "decimal" objects added, as
//     /api/v1/reports?decode=true shows them;
//   - csv: a header, then one row per report: feedID,
//     validFromTimestamp, observationsTimestamp, schema, every other field
//     of the schema (integers as decimal strings; a scaled field also as
//     NAME_decimal with its point placed), fullReport.
//
// A stream's reports share one schema (its ID's first two bytes), so the
// columns are known before the first row. It returns how many reports it
// wrote.
func Export(ctx context.Context, s Store, network string, stream feedid.ID, from, to uint32, format string, w io.Writer) (int, error) {
	if format != ExportJSONLines && format != ExportCSV {
		return 0, fmt.Errorf("archive: export format %q is not %s or %s", format, ExportJSONLines, ExportCSV)
	}
	sb, err := checkQuery(network, stream)
	if err != nil {
		return 0, err
	}
	schema := don.SchemaOf(sb[:])
	bw := bufio.NewWriter(w)
	var cw *csv.Writer
	cols := don.SchemaFields(schema)
	if format == ExportCSV {
		cw = csv.NewWriter(bw)
		if err := cw.Write(csvHeader(cols)); err != nil {
			return 0, err
		}
	}
	n := 0
	for start := uint64(from); start <= uint64(to); {
		page, err := s.Page(ctx, network, stream, uint32(start), ExportPage)
		if err != nil {
			return n, err
		}
		for i := range page {
			r := &page[i]
			if r.ObservationsTimestamp > to {
				page = nil
				start = uint64(to) + 1
				break
			}
			if cw != nil {
				err = cw.Write(csvRow(r, schema, cols))
			} else {
				_, err = bw.Write(jsonLine(r))
			}
			if err != nil {
				return n, err
			}
			n++
			start = uint64(r.ObservationsTimestamp) + 1
		}
		if len(page) < ExportPage {
			break
		}
	}
	if cw != nil {
		cw.Flush()
		if err := cw.Error(); err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

// jsonLine is r's record with the decoded view inside it, and a newline.
func jsonLine(r *Report) []byte {
	rec := r.JSON()
	line := append(rec[:len(rec)-1:len(rec)-1], ',')
	schema, fields, err := decodeFields(r.FullReport)
	switch {
	case err == nil:
		line = don.AppendFields(line, schema, fields)
	default:
		line = append(line, `"decoded":{"schema":"`+don.UnknownSchema+`"},"decimal":{}`...)
	}
	return append(line, "}\n"...)
}

func decodeFields(full []byte) (don.Schema, []don.Field, error) {
	env, err := don.DecodeEnvelope(full)
	if err != nil {
		return 0, nil, err
	}
	return don.DecodeBlob(env.ReportBlob)
}

// csvHeader returns the columns of a stream whose schema has the fields
// cols (none for an unknown schema): a scaled field has a NAME_decimal
// column after its own.
func csvHeader(cols []don.Field) []string {
	h := []string{"feedID", "validFromTimestamp", "observationsTimestamp", "schema"}
	for _, f := range cols {
		if recordColumn(f.Name) {
			continue
		}
		h = append(h, f.Name)
		if f.Scaled {
			h = append(h, f.Name+"_decimal")
		}
	}
	return append(h, "fullReport")
}

// csvRow is r's row under csvHeader(cols); a report that does not decode
// has its field columns empty.
func csvRow(r *Report, schema don.Schema, cols []don.Field) []string {
	row := []string{string(r.Stream), strconv.FormatUint(uint64(r.ValidFromTimestamp), 10),
		strconv.FormatUint(uint64(r.ObservationsTimestamp), 10), schema.String()}
	_, fields, err := decodeFields(r.FullReport)
	if err != nil || len(fields) != len(cols) {
		fields = nil
	}
	for i, c := range cols {
		if recordColumn(c.Name) {
			continue
		}
		var text, decimal string
		if fields != nil {
			text = fieldText(fields[i].Value)
			if v, ok := fields[i].Value.(*big.Int); ok && c.Scaled {
				decimal = string(don.AppendDecimal(nil, v, 18))
			}
		}
		row = append(row, text)
		if c.Scaled {
			row = append(row, decimal)
		}
	}
	return append(row, "0x"+hex.EncodeToString(r.FullReport))
}

// recordColumn reports whether a blob's field is one of the record's
// columns already (the record's times are the blob's: a report whose
// record says otherwise is refused before it is archived).
func recordColumn(name string) bool {
	return name == "feedId" || name == "validFromTimestamp" || name == "observationsTimestamp"
}

// fieldText writes a decoded value as the decoded view does, unquoted.
func fieldText(v any) string {
	switch v := v.(type) {
	case [32]byte:
		return "0x" + hex.EncodeToString(v[:])
	case string:
		return v
	case uint8:
		return strconv.FormatUint(uint64(v), 10)
	case uint32:
		return strconv.FormatUint(uint64(v), 10)
	case uint64:
		return strconv.FormatUint(v, 10)
	case *big.Int:
		return v.String()
	}
	return ""
}
