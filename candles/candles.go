// Package candles builds bars (open, high, low, close) of a stream's
// verified reports from the archive's rollups, in the answers that
// TradingView-style datafeeds and the Candlestick API's clients read:
// /api/v1/history ({"s":"ok","t":[…],"o":[…],…}) and /api/v1/history/rows
// ({"s":"ok","candles":[[t,o,h,l,c,v],…]}).
//
// A bar is exact or absent: it is built from every report whose
// observationsTimestamp falls in it, only when the archive's coverage
// holds its whole span (the bar in progress: up to now, less LiveLag);
// a bar whose span is not covered is left out and its span named in the
// answer's "missing". Bars are read from the rollup level that divides the
// resolution (archive.RollupLevels), never from the reports themselves.
// QueryFilled first fetches from the upstream, within a bound, the seconds
// of a request's bars that the archive does not cover (fill.go).
package candles

import (
	"context"
	"math/big"
	"time"

	"streamgate/archive"
	"streamgate/feedid"
)

// Source is what bars are read from: the archive's rollups and coverage.
// Both archive stores (Pebble, PostgreSQL) are one.
type Source interface {
	archive.RollupReader
	Coverage(ctx context.Context, network string, stream feedid.ID, from, to uint32) ([]archive.Span, error)
}

// LiveLag is how far behind now the bar in progress must be covered: the
// time a report takes from the upstream to the archive's coverage.
const LiveLag = 10 * time.Second

// Bar is one bar: its open time and the field's values (integers of 18
// decimals).
type Bar struct {
	Time                   uint32
	Open, High, Low, Close *big.Int
	Reports                uint32
}

// Result is the answer to a request: the bars in ascending open time, the
// spans of the bars left out because the archive does not cover them
// (merged, ascending), and, when there is no bar, the open time of the
// latest bar before the span, if any (NextTime, HasNext).
type Result struct {
	Bars     []Bar
	Missing  []archive.Span
	NextTime uint32
	HasNext  bool
}

// Query builds the bars of rq on network from src at the time now.
func Query(ctx context.Context, src Source, network string, rq Request, now time.Time) (Result, error) {
	var res Result
	nowS := now.Unix()
	first, last, n := rq.Span(nowS)
	if n > MaxBars {
		return res, rq.CheckSpan(nowS)
	}
	if n > 0 {
		size := int64(rq.Resolution.Seconds)
		end := min(last+size-1, int64(^uint32(0)))
		spans, err := src.Coverage(ctx, network, rq.Stream, uint32(first), uint32(end))
		if err != nil {
			return res, err
		}
		level := levelFor(rq.Resolution.Seconds)
		rows, err := src.Rollups(ctx, network, rq.Stream, level, rq.Field, uint32(first), uint32(end))
		if err != nil {
			return res, err
		}
		build(&res, rows, spans, first, last, size, nowS)
	}
	if len(res.Bars) == 0 {
		before, ok, err := src.RollupBefore(ctx, network, rq.Stream, uint32(min(first, int64(^uint32(0)))))
		if err != nil {
			return res, err
		}
		if ok {
			res.NextTime, res.HasNext = before-before%rq.Resolution.Seconds, true
		}
	}
	return res, nil
}

// levelFor returns the largest rollup level that divides a resolution.
func levelFor(res uint32) uint32 {
	level := archive.RollupLevels[0]
	for _, l := range archive.RollupLevels {
		if res%l == 0 {
			level = l
		}
	}
	return level
}

// build makes the bars from first to last (open times, size apart) of
// the rollups rows (ascending) where spans (ascending, merged) cover them,
// and notes the others' spans as missing.
func build(res *Result, rows []archive.Bar, spans []archive.Span, first, last, size, now int64) {
	ri, si := 0, 0
	for t := first; t <= last; t += size {
		end := t + size - 1
		need := end // the span that must be covered
		live := now < t+size
		if live {
			need = now - int64(LiveLag/time.Second)
		}
		var bar Bar
		var undecoded uint32
		for ; ri < len(rows) && int64(rows[ri].Start) <= end; ri++ {
			r := rows[ri]
			if int64(r.Start) < t {
				continue
			}
			undecoded += r.Undecoded
			if r.Reports == 0 {
				continue
			}
			if bar.Reports == 0 {
				bar = Bar{Time: uint32(t), Open: r.Open, High: r.High, Low: r.Low}
			}
			bar.Close = r.Close
			bar.Reports += r.Reports
			if r.High.Cmp(bar.High) > 0 {
				bar.High = r.High
			}
			if r.Low.Cmp(bar.Low) < 0 {
				bar.Low = r.Low
			}
		}
		for si < len(spans) && int64(spans[si].To) < t {
			si++
		}
		covered := need < t || si < len(spans) && int64(spans[si].From) <= t && int64(spans[si].To) >= need
		if !covered || undecoded > 0 {
			gone := archive.Span{From: uint32(t), To: uint32(min(end, max(now, t)))}
			if m := len(res.Missing); m > 0 && int64(res.Missing[m-1].To)+1 == t {
				res.Missing[m-1].To = gone.To
			} else {
				res.Missing = append(res.Missing, gone)
			}
			continue
		}
		if bar.Reports > 0 {
			res.Bars = append(res.Bars, bar)
		}
	}
}
