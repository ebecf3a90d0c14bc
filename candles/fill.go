package candles

import (
	"context"
	"fmt"
	"time"

	"streamgate/archive"
	"streamgate/feedid"
)

// Filling the bars the archive does not cover: before the bars of a
// request are built, the seconds of its span the archive's coverage lacks
// are fetched from the upstream, page by page (Fill.Pages: the gateway's
// page path, at the fills' share of the upstream budget), written to the
// archive with the coverage each page proves, as an operator's fill does
// (archive.Filler). A request fetches at most Fill.MaxPages pages and
// waits at most Fill.Wait for them (or its own deadline, when earlier);
// what is not filled by then stays missing, named in the answer's
// "missing", and the next request goes on where this one stopped. The last
// archive.FillSettle seconds are never fetched (the upstream's page of
// them may not hold every report yet): the live stream covers them, and
// the bar in progress keeps its rule (LiveLag).

// The bounds of one request's fill.
const (
	// MaxFillPages is the most upstream pages one bars request fetches.
	MaxFillPages = 20
	// FillPageLimit is the reports asked per page, as an operator's fill
	// asks (archive.FillerOptions): at a report a second, a request fills
	// up to MaxFillPages × FillPageLimit seconds (33 min 20 s). A page
	// shorter than asked is read as holding every report up to the
	// present, so the limit is never above the upstream's own page
	// maximum.
	FillPageLimit = 100
	// FillWait is the longest a request waits for its pages.
	FillWait = 10 * time.Second
)

// Fill is where and how much a request may fill. The zero Fill fills
// nothing.
type Fill struct {
	// Pages fetches the upstream's page of a stream (nil: no fill).
	Pages archive.PageSource
	// MaxPages, PageLimit and Wait bound one request's fill; 0: the
	// defaults MaxFillPages, FillPageLimit, FillWait.
	MaxPages  int
	PageLimit int
	Wait      time.Duration
}

// FillStore is what a fill writes to: a store's reports and coverage
// (both archive stores).
type FillStore interface {
	Source
	Write(ctx context.Context, reports []archive.Report) (archive.WriteResult, error)
	AddCoverage(ctx context.Context, network string, stream feedid.ID, span archive.Span) error
}

// Filled is what one request's fill did.
type Filled struct {
	Pages   int   // upstream pages fetched
	Reports int   // reports those pages held
	Err     error // why the fill stopped before the span was covered (the bound, a failed page), nil when it was
}

// ErrFillBound is Filled.Err when a request's fill reached MaxPages or
// Wait before its span was covered.
var ErrFillBound = fmt.Errorf("candles: the fill of one request stopped at its bound")

// QueryFilled builds the bars of rq as Query does, after filling from the
// upstream (f) the seconds of their span that src does not cover. A fill
// that stops (its bound, a page that fails) leaves the rest missing; only
// src's own errors fail the request.
func QueryFilled(ctx context.Context, src FillStore, network string, rq Request, now time.Time, f Fill) (Result, Filled, error) {
	var done Filled
	if f.Pages != nil {
		done = fill(ctx, src, network, rq, now, f)
	}
	res, err := Query(ctx, src, network, rq, now)
	return res, done, err
}

// fill fetches the holes of the coverage of rq's bars, up to
// archive.FillSettle before now, in ascending order, within f's bounds.
func fill(ctx context.Context, src FillStore, network string, rq Request, now time.Time, f Fill) Filled {
	var done Filled
	if f.MaxPages <= 0 {
		f.MaxPages = MaxFillPages
	}
	if f.PageLimit <= 0 {
		f.PageLimit = FillPageLimit
	}
	if f.Wait <= 0 {
		f.Wait = FillWait
	}
	first, last, n := rq.Span(now.Unix())
	settled := now.Add(-archive.FillSettle).Unix()
	if n == 0 || n > MaxBars || first > settled {
		return done
	}
	end := min(last+int64(rq.Resolution.Seconds)-1, settled)
	spans, err := src.Coverage(ctx, network, rq.Stream, uint32(first), uint32(end))
	if err != nil {
		done.Err = err
		return done
	}
	holes := archive.Holes(spans, uint32(first), uint32(end))
	if len(holes) == 0 {
		return done
	}
	wait, cancel := context.WithTimeout(ctx, f.Wait)
	defer cancel()
	for _, h := range holes {
		for {
			if done.Pages >= f.MaxPages || wait.Err() != nil {
				done.Err = ErrFillBound
				return done
			}
			next, err := fillPage(ctx, wait, src, f.Pages, network, rq, h, f.PageLimit, &done)
			if err != nil {
				if wait.Err() != nil {
					err = ErrFillBound
				}
				done.Err = err
				return done
			}
			if next == nil {
				break
			}
			h.From = *next
		}
	}
	return done
}

// fillPage fetches the page at hole.From, writes its reports and records
// what it proves, as archive.Filler does: a full page covers [hole.From,
// its last report]; a page shorter than asked holds every report from
// hole.From up to the time it was asked (after hole.To, which is
// archive.FillSettle before now), so it covers the whole hole. It returns
// where the hole goes on (nil: it is covered).
// The page is awaited within wait (the fill's bound); a page fetched is
// written within ctx (the request's), so that none is lost to the bound.
func fillPage(ctx, wait context.Context, src FillStore, pages archive.PageSource, network string, rq Request, hole archive.Span, limit int, done *Filled) (*uint32, error) {
	reports, err := pages(wait, network, rq.Stream, hole.From, limit)
	if err != nil {
		return nil, err
	}
	done.Pages++
	done.Reports += len(reports)
	last := uint32(0)
	for i := range reports {
		r := &reports[i]
		if r.Network != network || r.Stream != rq.Stream || r.ObservationsTimestamp < hole.From ||
			(i > 0 && r.ObservationsTimestamp <= last) {
			return nil, fmt.Errorf("candles: fill: the page at %d holds a report that does not belong to it (%s at %d)",
				hole.From, r.Stream, r.ObservationsTimestamp)
		}
		last = r.ObservationsTimestamp
	}
	if len(reports) > 0 {
		if _, err := src.Write(ctx, reports); err != nil {
			return nil, err
		}
	}
	span := hole
	if len(reports) >= limit {
		span.To = last
	} else if last > span.To {
		span.To = last
	}
	if err := src.AddCoverage(ctx, network, rq.Stream, span); err != nil {
		return nil, err
	}
	if span.To >= hole.To {
		return nil, nil
	}
	next := span.To + 1
	return &next, nil
}
