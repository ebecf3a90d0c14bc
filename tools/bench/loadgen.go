package main

import (
	"context"
	"errors"
	"hash/maphash"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"streamgate/auth"
)

// key is a client key: an ID and its HMAC secret.
type key struct {
	ID     string
	Secret []byte
}

// call is one request to make: a target (path and query, exactly as sent)
// on one of the load's base URLs.
type call struct {
	Base      int    // index into load.Bases
	Target    string // "/api/v1/..." with its query
	Anonymous bool   // send it unsigned
}

// load is a closed-loop load: Concurrency workers, each sending one request
// at a time over a shared keep-alive client, until Duration has passed or
// MaxRequests have been started, whichever comes first. Every request is
// signed afresh.
type load struct {
	Client      *http.Client
	Bases       []string
	Keys        []key // worker w signs with Keys[w%len(Keys)]; none: unsigned
	Concurrency int
	Duration    time.Duration
	MaxRequests int64 // 0: no bound
	// Next returns the i-th request (i counts from 0 across all workers);
	// rng is the worker's own.
	Next func(i int64, worker int, rng *rand.Rand) call
	// Stamps hands out signing timestamps; shared by loads that use the
	// same keys on the same targets. Nil: a new one.
	Stamps *stamps
}

// result is what a load measured.
type result struct {
	Requests int64 // answered, any status
	Errors   int64 // no answer (transport errors)
	Bytes    int64
	Elapsed  time.Duration
	Status   map[int]int64
	XCache   map[string]int64 // X-Cache values of the answers
	ErrKinds map[string]int64
	ErrFirst map[string]string // one message per kind
	Lead     time.Duration     // largest lead of a signing timestamp over the clock
	CPU      time.Duration     // CPU time of the whole process (client and servers)
	Hist     histogram
}

// cpuPerRequest is the process's CPU time per answered request.
func (r *result) cpuPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.CPU / time.Duration(r.Requests)
}

// add merges o, measured apart from r (another round), into r.
func (r *result) add(o *result) {
	r.Requests += o.Requests
	r.Errors += o.Errors
	r.Bytes += o.Bytes
	r.Elapsed += o.Elapsed
	r.CPU += o.CPU
	r.Lead = max(r.Lead, o.Lead)
	addCounts(r.Status, o.Status)
	addCounts(r.XCache, o.XCache)
	for k, v := range o.ErrKinds {
		r.ErrKinds[k] += v
		if _, ok := r.ErrFirst[k]; !ok {
			r.ErrFirst[k] = o.ErrFirst[k]
		}
	}
	r.Hist.merge(&o.Hist)
}

func newResult() *result {
	return &result{Status: map[int]int64{}, XCache: map[string]int64{}, ErrKinds: map[string]int64{}, ErrFirst: map[string]string{}}
}

// rate is answered requests per second.
func (r *result) rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// ok is the number of 2xx answers.
func (r *result) ok() int64 {
	var n int64
	for s, c := range r.Status {
		if s >= 200 && s < 300 {
			n += c
		}
	}
	return n
}

type workerResult struct {
	requests, errors, bytes int64
	status                  map[int]int64
	xcache                  map[string]int64
	errKinds                map[string]int64
	errFirst                map[string]string
	hist                    histogram
}

// run runs the load. Requests in flight when the time is up are finished
// and counted; ctx ending stops the load at once, and requests it cut off
// are not counted.
func (l *load) run(ctx context.Context) *result {
	conc := max(l.Concurrency, 1)
	st := l.Stamps
	if st == nil {
		st = newStamps()
	}
	var seq atomic.Int64
	results := make([]*workerResult, conc)
	cpu := processCPU()
	start := time.Now()
	deadline := start.Add(l.Duration)
	var wg sync.WaitGroup
	for w := range conc {
		wr := &workerResult{status: map[int]int64{}, xcache: map[string]int64{}, errKinds: map[string]int64{}, errFirst: map[string]string{}}
		results[w] = wr
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.worker(ctx, w, deadline, &seq, st, wr)
		}()
	}
	wg.Wait()
	res := newResult()
	res.Elapsed, res.CPU = time.Since(start), processCPU()-cpu
	res.Lead = time.Duration(st.lead.Load()) * time.Millisecond
	for _, wr := range results {
		res.Requests += wr.requests
		res.Errors += wr.errors
		res.Bytes += wr.bytes
		addCounts(res.Status, wr.status)
		addCounts(res.XCache, wr.xcache)
		for k, v := range wr.errKinds {
			res.ErrKinds[k] += v
			if _, ok := res.ErrFirst[k]; !ok {
				res.ErrFirst[k] = wr.errFirst[k]
			}
		}
		res.Hist.merge(&wr.hist)
	}
	return res
}

func (l *load) worker(ctx context.Context, w int, deadline time.Time, seq *atomic.Int64, st *stamps, wr *workerResult) {
	rng := rand.New(rand.NewPCG(uint64(w)+1, uint64(deadline.UnixNano())))
	var k *key
	if len(l.Keys) > 0 {
		k = &l.Keys[w%len(l.Keys)]
	}
	for ctx.Err() == nil && time.Now().Before(deadline) {
		i := seq.Add(1) - 1
		if l.MaxRequests > 0 && i >= l.MaxRequests {
			return
		}
		c := l.Next(i, w, rng)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.Bases[c.Base]+c.Target, nil)
		if err != nil {
			wr.fail("build", err)
			continue
		}
		if k != nil && !c.Anonymous {
			ts := st.next(w%len(l.Keys), c.Target, time.Now())
			auth.Sign(req, k.ID, k.Secret, time.UnixMilli(ts))
		}
		start := time.Now()
		resp, err := l.Client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				wr.fail(errKind(err), err)
			}
			continue
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err != nil {
			if ctx.Err() == nil {
				wr.fail(errKind(err), err)
			}
			continue
		}
		wr.requests++
		wr.bytes += n
		wr.status[resp.StatusCode]++
		if xc := resp.Header.Get("X-Cache"); xc != "" {
			wr.xcache[xc]++
		}
		wr.hist.record(d)
	}
}

func (wr *workerResult) fail(kind string, err error) {
	wr.errors++
	wr.errKinds[kind]++
	if _, ok := wr.errFirst[kind]; !ok {
		wr.errFirst[kind] = err.Error()
	}
}

// errKind is a short label for a transport error.
func errKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no-ports"
	}
	return "other"
}

// stamps hands out signing timestamps (Unix milliseconds) so that no two
// requests with the same key and target carry the same one: the gateway
// refuses a signature it has seen, and two requests for one target signed
// in the same millisecond would sign the same string. Key and target hash
// to one of a fixed number of slots, each a monotonic clock; two targets
// sharing a slot only get more distinct timestamps. It is safe for
// concurrent use.
type stamps struct {
	seed  maphash.Seed
	slots [1 << 14]atomic.Int64
	lead  atomic.Int64 // largest lead over the clock, in ms
}

func newStamps() *stamps { return &stamps{seed: maphash.MakeSeed()} }

func (s *stamps) next(keyIndex int, target string, now time.Time) int64 {
	h := maphash.String(s.seed, target) ^ uint64(keyIndex)*0x9e3779b97f4a7c15
	slot := &s.slots[h%uint64(len(s.slots))]
	ms := now.UnixMilli()
	for {
		last := slot.Load()
		ts := max(ms, last+1)
		if slot.CompareAndSwap(last, ts) {
			if lead := ts - ms; lead > 0 {
				for {
					old := s.lead.Load()
					if lead <= old || s.lead.CompareAndSwap(old, lead) {
						break
					}
				}
			}
			return ts
		}
	}
}

// newClient is one keep-alive client for conns concurrent requests per
// host. It never uses a proxy from the environment.
func newClient(conns int) *http.Client {
	t := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // no limit across hosts
		MaxIdleConnsPerHost: max(conns, 2),
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// The printed table.
