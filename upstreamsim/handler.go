package upstreamsim

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"streamgate/auth"
	"streamgate/catalog"
)

// Page limits of /api/v1/reports/page.
const (
	DefaultPageLimit = 10
	MaxPageLimit     = 100
)

// OriginsHeader is the header of HEAD / (origin discovery of the
// high-availability clients); OriginsValue is its value for the origins
// "001" and "002" (see Config.HAOrigins). OriginHeader chooses an origin on
// a WebSocket upgrade.
const (
	OriginsHeader = "X-Cll-Available-Origins"
	OriginsValue  = "{001,002}"
	OriginHeader  = "X-Cll-Origin"
)

// Handler returns the API of one network, Mainnet or Testnet; it panics on
// any other name. Serve each network on its own address: the official
// clients choose a network by host, never by path.
func (s *Simulator) Handler(network string) http.Handler {
	return &apiHandler{s: s, n: s.network(network)}
}

type apiHandler struct {
	s *Simulator
	n *network
}

var _ http.Handler = (*apiHandler)(nil)

func endpointOf(path string) string {
	switch path {
	case EndpointRoot, EndpointDiscovery, EndpointFeeds, EndpointReport, EndpointLatest,
		EndpointBulk, EndpointPage, EndpointWS:
		return path
	}
	return EndpointOther
}

func (h *apiHandler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	ep := endpointOf(r.URL.Path)
	w := &countingWriter{ResponseWriter: rw, cs: &h.s.counters,
		k: countKey{network: h.n.name, endpoint: ep, key: h.keyLabel(r.Header.Get(auth.HeaderAuthorization))}}
	defer func() {
		w.count(StatusNoResponse) // when nothing was written
		if ep == EndpointWS && w.k.status != http.StatusSwitchingProtocols {
			h.s.counters.addWS(w.k.network, w.k.key, 0, 1, 0, 0)
		}
	}()
	catalogStyle := ep == EndpointDiscovery
	if h.s.faults.refuseOutage(w, catalogStyle) {
		return
	}
	if !h.s.faults.inject(w, r, catalogStyle) {
		return
	}
	if ep == EndpointOther {
		writeError(w, http.StatusNotFound, "no such endpoint: "+truncate(r.URL.Path), false)
		return
	}
	if ep == EndpointRoot {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method not allowed: "+truncate(r.Method), false)
			return
		}
		h.root(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "method not allowed: "+truncate(r.Method), catalogStyle)
		return
	}
	switch ep {
	case EndpointDiscovery:
		h.discovery(w, r)
	case EndpointFeeds:
		h.feeds(w, r)
	case EndpointReport:
		h.report(w, r)
	case EndpointLatest:
		h.latest(w, r)
	case EndpointBulk:
		h.bulk(w, r)
	case EndpointPage:
		h.page(w, r)
	case EndpointWS:
		h.ws(w, r)
	}
}

// root answers GET and HEAD /: 200, with the HA origins in OriginsHeader
// when Config.HAOrigins is set. Credentials, when sent, are checked (the
// official clients sign this request); a request without any is answered
// too.
func (h *apiHandler) root(w http.ResponseWriter, r *http.Request) {
	if auth.HasCredentials(r.Header) {
		if _, ok := h.authorize(w, r, EndpointRoot); !ok {
			return
		}
	}
	if h.s.originsHV != "" {
		w.Header().Set(OriginsHeader, h.s.originsHV)
	}
	w.WriteHeader(http.StatusOK)
}

// keyLabel is the counters' label of the key named id.
func (h *apiHandler) keyLabel(id string) string {
	s := h.s
	if id == "" {
		return KeyAnonymous
	}
	if k, ok := s.keys[id]; ok {
		return k.ID
	}
	return KeyUnknown
}

// authorize checks the credentials of r and the rate limit of its key. On
// failure it writes the error and returns false.
func (h *apiHandler) authorize(w http.ResponseWriter, r *http.Request, ep string) (*key, bool) {
	catalogStyle := ep == EndpointDiscovery
	uri := r.RequestURI
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	k, ok := h.verify(w, r, catalogStyle, uri, "")
	if !ok {
		return nil, false
	}
	if h.s.limit > 0 {
		if !h.n.allow(h.s, k.ID, ep, h.countAt(r), h.s.now()) {
			retry := max(1, int(math.Ceil(1/float64(h.s.limit))))
			w.Header().Set("Retry-After", strconv.Itoa(retry))
			writeError(w, http.StatusTooManyRequests, "rate limit exceeded", catalogStyle)
			return nil, false
		}
	}
	return k, true
}

// verify checks the credentials of r: the signature of target, or of
// alt when alt is not empty, and the timestamp's skew. On failure it
// writes the error and returns false.
func (h *apiHandler) verify(w http.ResponseWriter, r *http.Request, catalogStyle bool, target, alt string) (*key, bool) {
	c, err := auth.ParseCredentials(r.Header)
	if err != nil {
		msg := "malformed authentication headers"
		if errors.Is(err, auth.ErrMissingHeaders) {
			msg = "missing authentication headers: Authorization, X-Authorization-Timestamp and X-Authorization-Signature-SHA256 are required"
		}
		writeError(w, http.StatusBadRequest, msg, catalogStyle)
		return nil, false
	}
	k := h.s.keys[c.KeyID]
	if k == nil {
		writeError(w, http.StatusUnauthorized, "authentication failed: unknown key", catalogStyle)
		return nil, false
	}
	if !c.Valid(k.secret, r.Method, target, auth.EmptyBodyHash) &&
		(alt == "" || alt == target || !c.Valid(k.secret, r.Method, alt, auth.EmptyBodyHash)) {
		writeError(w, http.StatusUnauthorized, "authentication failed: signature mismatch", catalogStyle)
		return nil, false
	}
	if d := h.s.now().Sub(c.Time()); d > h.s.maxSkew || d < -h.s.maxSkew {
		writeError(w, http.StatusUnauthorized, "authentication failed: timestamp outside the allowed skew of "+h.s.maxSkew.String(), catalogStyle)
		return nil, false
	}
	return k, true
}

func (h *apiHandler) discovery(w http.ResponseWriter, r *http.Request) {
	var k *key
	if auth.HasCredentials(r.Header) {
		var ok bool
		if k, ok = h.authorize(w, r, EndpointDiscovery); !ok {
			return
		}
	}
	f, err := catalog.ParseFilter(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), true)
		return
	}
	b := getBuf()
	defer putBuf(b)
	*b = append(*b, `{"feeds":[`...)
	first := true
	for _, st := range h.n.streams {
		if st.hidden && !(f.Hidden && k != nil && k.mayRead(st)) {
			continue
		}
		if !f.MatchIndexed(&st.Indexed) {
			continue
		}
		if !first {
			*b = append(*b, ',')
		}
		first = false
		*b = append(*b, st.json...)
	}
	*b = append(*b, "]}"...)
	w.Header().Set("Cache-Control", "public, max-age=300")
	writeJSON(w, http.StatusOK, *b)
}

func (h *apiHandler) feeds(w http.ResponseWriter, r *http.Request) {
	k, ok := h.authorize(w, r, EndpointFeeds)
	if !ok {
		return
	}
	hidden, err := catalog.ParseHidden(r.URL.Query().Get("hidden"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), false)
		return
	}
	b := getBuf()
	defer putBuf(b)
	*b = append(*b, `{"feeds":[`...)
	first := true
	for _, st := range h.n.streams {
		if (st.hidden && !hidden) || !k.mayRead(st) {
			continue
		}
		if !first {
			*b = append(*b, ',')
		}
		first = false
		*b = append(*b, st.refJSON...)
	}
	*b = append(*b, "]}"...)
	writeJSON(w, http.StatusOK, *b)
}

// stream resolves a validated feed ID for k: nil, after writing 401, when
// the stream does not exist or k may not read it.
func (h *apiHandler) stream(w http.ResponseWriter, k *key, id [32]byte) *stream {
	var hexID [66]byte
	hexID[0], hexID[1] = '0', 'x'
	const digits = "0123456789abcdef"
	for i, c := range id {
		hexID[2+2*i], hexID[3+2*i] = digits[c>>4], digits[c&0xf]
	}
	st := h.n.byID[string(hexID[:])]
	if st == nil || !k.mayRead(st) {
		writeError(w, http.StatusUnauthorized, "unauthorized: the stream does not exist or this key may not read it", false)
		return nil
	}
	return st
}

func (h *apiHandler) report(w http.ResponseWriter, r *http.Request) {
	k, ok := h.authorize(w, r, EndpointReport)
	if !ok {
		return
	}
	q := r.URL.Query()
	id, ok := feedIDParam(w, q.Get("feedID"), "feedID")
	if !ok {
		return
	}
	ts, ok := timestampParam(w, q.Get("timestamp"), "timestamp")
	if !ok {
		return
	}
	st := h.stream(w, k, id)
	if st == nil {
		return
	}
	first, last := st.window(h.s.now().Unix(), h.s.history)
	if ts < first || ts > last {
		writeError(w, http.StatusNotFound, "no report for this stream at timestamp "+strconv.FormatInt(ts, 10), false)
		return
	}
	h.writeReport(w, st, ts)
}

func (h *apiHandler) latest(w http.ResponseWriter, r *http.Request) {
	k, ok := h.authorize(w, r, EndpointLatest)
	if !ok {
		return
	}
	id, ok := feedIDParam(w, r.URL.Query().Get("feedID"), "feedID")
	if !ok {
		return
	}
	st := h.stream(w, k, id)
	if st == nil {
		return
	}
	first, last := st.window(h.s.now().Unix(), h.s.history)
	if first > last {
		writeError(w, http.StatusNotFound, "no report for this stream", false)
		return
	}
	h.writeReport(w, st, last)
}

func (h *apiHandler) writeReport(w http.ResponseWriter, st *stream, ts int64) {
	b := getBuf()
	defer putBuf(b)
	*b = append(*b, `{"report":`...)
	*b = h.s.appendReport(*b, h.n, st, ts)
	*b = append(*b, '}')
	writeJSON(w, http.StatusOK, *b)
}

func (h *apiHandler) bulk(w http.ResponseWriter, r *http.Request) {
	k, ok := h.authorize(w, r, EndpointBulk)
	if !ok {
		return
	}
	q := r.URL.Query()
	raw := q.Get("feedIDs")
	if raw == "" {
		writeError(w, http.StatusBadRequest, "missing parameter feedIDs: a comma-separated list of stream IDs", false)
		return
	}
	n := strings.Count(raw, ",") + 1
	if h.s.maxBulk > 0 && n > h.s.maxBulk {
		writeError(w, http.StatusBadRequest, "too many stream IDs in feedIDs: at most "+strconv.Itoa(h.s.maxBulk), false)
		return
	}
	ids := make([][32]byte, 0, n)
	for item := range strings.SplitSeq(raw, ",") {
		id, ok := feedIDParam(w, item, "feedIDs")
		if !ok {
			return
		}
		ids = append(ids, id)
	}
	ts, ok := timestampParam(w, q.Get("timestamp"), "timestamp")
	if !ok {
		return
	}
	streams := make([]*stream, 0, len(ids))
	for _, id := range ids {
		st := h.stream(w, k, id)
		if st == nil {
			return
		}
		dup := false
		for _, seen := range streams {
			dup = dup || seen == st
		}
		if !dup {
			streams = append(streams, st)
		}
	}
	now := h.s.now().Unix()
	b := getBuf()
	defer putBuf(b)
	*b = append(*b, `{"reports":[`...)
	status, first := http.StatusOK, true
	for _, st := range streams {
		lo, hi := st.window(now, h.s.history)
		if ts < lo || ts > hi {
			status = http.StatusPartialContent
			continue
		}
		if !first {
			*b = append(*b, ',')
		}
		first = false
		*b = h.s.appendReport(*b, h.n, st, ts)
	}
	*b = append(*b, "]}"...)
	writeJSON(w, status, *b)
}

func (h *apiHandler) page(w http.ResponseWriter, r *http.Request) {
	k, ok := h.authorize(w, r, EndpointPage)
	if !ok {
		return
	}
	q := r.URL.Query()
	id, ok := feedIDParam(w, q.Get("feedID"), "feedID")
	if !ok {
		return
	}
	start, ok := timestampParam(w, q.Get("startTimestamp"), "startTimestamp")
	if !ok {
		return
	}
	limit := int64(DefaultPageLimit)
	if q.Has("limit") {
		v := q.Get("limit")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 || !digitsOnly(v) {
			writeError(w, http.StatusBadRequest, "malformed parameter limit: want a positive integer, got "+strconv.Quote(truncate(v)), false)
			return
		}
		limit = min(n, MaxPageLimit)
	}
	st := h.stream(w, k, id)
	if st == nil {
		return
	}
	lo, hi := st.window(h.s.now().Unix(), h.s.history)
	from := max(start, lo)
	to := min(hi, from+limit-1)
	b := getBuf()
	defer putBuf(b)
	*b = append(*b, `{"reports":[`...)
	for ts := from; ts <= to; ts++ {
		if ts != from {
			*b = append(*b, ',')
		}
		*b = h.s.appendReport(*b, h.n, st, ts)
	}
	*b = append(*b, "]}"...)
	writeJSON(w, http.StatusOK, *b)
}

// feedIDParam validates a stream ID parameter; on failure it writes 400.
func feedIDParam(w http.ResponseWriter, v, name string) ([32]byte, bool) {
	if v == "" {
		writeError(w, http.StatusBadRequest, "missing parameter "+name, false)
		return [32]byte{}, false
	}
	id, ok := streamID(v)
	if !ok {
		writeError(w, http.StatusBadRequest, "malformed parameter "+name+": want 0x and 64 hex digits, got "+strconv.Quote(truncate(v)), false)
	}
	return id, ok
}

// timestampParam validates a Unix timestamp in seconds; on failure it
// writes 400.
func timestampParam(w http.ResponseWriter, v, name string) (int64, bool) {
	if v == "" {
		writeError(w, http.StatusBadRequest, "missing parameter "+name, false)
		return 0, false
	}
	ts, err := strconv.ParseInt(v, 10, 64)
	if err != nil || !digitsOnly(v) {
		writeError(w, http.StatusBadRequest, "malformed parameter "+name+": want a Unix timestamp in seconds, got "+strconv.Quote(truncate(v)), false)
		return 0, false
	}
	return ts, true
}

func digitsOnly(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
	}
	return v != ""
}

func truncate(v string) string {
	if len(v) > 80 {
		return v[:80] + "..."
	}
	return v
}

// writeError writes a JSON error: {"error": msg} in the catalog's style,
// else {"error": msg, "message": msg}.
func writeError(w http.ResponseWriter, status int, msg string, catalogStyle bool) {
	var body any
	if catalogStyle {
		body = struct {
			Error string `json:"error"`
		}{msg}
	} else {
		body = struct {
			Error   string `json:"error"`
			Message string `json:"message"`
		}{msg, msg}
	}
	b, _ := json.Marshal(body)
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 1<<20 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}
