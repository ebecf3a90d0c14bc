package candles

import (
	"math/big"
	"strconv"

	"streamgate/don"
)

// Decimals is the scale of every field bars are built of.
const Decimals = 18

// appendValue appends v·10⁻¹⁸: a JSON number (the nearest float64, in the
// shortest form that reads back as it), or with precise an exact decimal
// string with all 18 decimals.
func appendValue(dst []byte, v *big.Int, precise bool, scratch []byte) ([]byte, []byte) {
	scratch = don.AppendDecimal(scratch[:0], v, Decimals)
	if precise {
		dst = append(dst, '"')
		dst = append(dst, scratch...)
		return append(dst, '"'), scratch
	}
	f, _ := strconv.ParseFloat(string(scratch), 64) // correctly rounded; a decimal of 18 places always parses
	return strconv.AppendFloat(dst, f, 'f', -1, 64), scratch
}

// appendMissing appends "missing": the spans of the bars left out, when
// there are any.
func appendMissing(dst []byte, res *Result) []byte {
	if len(res.Missing) == 0 {
		return dst
	}
	dst = append(dst, `,"missing":[`...)
	for i, m := range res.Missing {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"from":`...)
		dst = strconv.AppendUint(dst, uint64(m.From), 10)
		dst = append(dst, `,"to":`...)
		dst = strconv.AppendUint(dst, uint64(m.To), 10)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendNoData appends {"s":"no_data"} with nextTime and missing.
func appendNoData(dst []byte, res *Result) []byte {
	dst = append(dst, `{"s":"no_data"`...)
	if res.HasNext {
		dst = append(dst, `,"nextTime":`...)
		dst = strconv.AppendUint(dst, uint64(res.NextTime), 10)
	}
	dst = appendMissing(dst, res)
	return append(dst, "}\n"...)
}

// AppendHistory appends the /api/v1/history answer of res:
// {"s":"ok","t":[…],"o":[…],"h":[…],"l":[…],"c":[…],"v":[]} (and
// "missing" when bars were left out), or {"s":"no_data"} (with
// "nextTime" when an older bar exists).
func AppendHistory(dst []byte, res *Result, precise bool) []byte {
	if len(res.Bars) == 0 {
		return appendNoData(dst, res)
	}
	dst = append(dst, `{"s":"ok","t":[`...)
	for i, b := range res.Bars {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(b.Time), 10)
	}
	var scratch []byte
	for _, col := range [...]struct {
		name string
		pick func(*Bar) *big.Int
	}{
		{"o", func(b *Bar) *big.Int { return b.Open }},
		{"h", func(b *Bar) *big.Int { return b.High }},
		{"l", func(b *Bar) *big.Int { return b.Low }},
		{"c", func(b *Bar) *big.Int { return b.Close }},
	} {
		dst = append(dst, `],"`...)
		dst = append(dst, col.name...)
		dst = append(dst, `":[`...)
		for i := range res.Bars {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst, scratch = appendValue(dst, col.pick(&res.Bars[i]), precise, scratch)
		}
	}
	dst = append(dst, `],"v":[]`...)
	dst = appendMissing(dst, res)
	return append(dst, "}\n"...)
}

// AppendRows appends the /api/v1/history/rows answer of res:
// {"s":"ok","candles":[[t,o,h,l,c,0],…]} (and "missing"), or no_data as
// AppendHistory.
func AppendRows(dst []byte, res *Result, precise bool) []byte {
	if len(res.Bars) == 0 {
		return appendNoData(dst, res)
	}
	dst = append(dst, `{"s":"ok","candles":[`...)
	var scratch []byte
	for i, b := range res.Bars {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '[')
		dst = strconv.AppendUint(dst, uint64(b.Time), 10)
		for _, v := range [...]*big.Int{b.Open, b.High, b.Low, b.Close} {
			dst = append(dst, ',')
			dst, scratch = appendValue(dst, v, precise, scratch)
		}
		dst = append(dst, ",0]"...)
	}
	dst = append(dst, ']')
	dst = appendMissing(dst, res)
	return append(dst, "}\n"...)
}
