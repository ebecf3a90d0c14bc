package upstreamsim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/feedid"
)

// wsEnv is an env on a settable clock whose WebSocket connections look for
// new reports every few milliseconds: a test moves the clock, and the
// reports of the new seconds follow at once.
type wsEnv struct {
	*env
	clk *clockwork.FakeClock
}

func newWSEnv(t *testing.T, mutate func(*Config)) *wsEnv {
	t.Helper()
	clk := clockwork.NewFakeClockAt(t0)
	e := newEnv(t, func(c *Config) {
		c.Now = clk.Now
		c.WSTick = 2 * time.Millisecond
		if mutate != nil {
			mutate(c)
		}
	})
	return &wsEnv{env: e, clk: clk}
}

// wsDial opens target (path and query exactly as sent) on network. With
// c, it signs signed (the target when empty) at the env's clock; extra
// headers are set after signing.
func (e *wsEnv) wsDial(t *testing.T, network, target, signed string, c *creds, extra http.Header) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	u := "ws" + strings.TrimPrefix(e.srv[network].URL, "http") + target
	pu, err := url.Parse(u)
	require.NoError(t, err)
	require.Equal(t, target, pu.RequestURI(), "the target must go on the wire unchanged")
	h := http.Header{}
	if c != nil {
		if signed == "" {
			signed = target
		}
		tsMillis := strconv.FormatInt(e.now().UnixMilli(), 10)
		h.Set(auth.HeaderAuthorization, c.id)
		h.Set(auth.HeaderTimestamp, tsMillis)
		h.Set(auth.HeaderSignature, auth.SignatureHex([]byte(c.secret), http.MethodGet, signed, auth.EmptyBodyHash, c.id, tsMillis))
	}
	for k, v := range extra {
		h[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if conn != nil {
		t.Cleanup(func() { conn.CloseNow() })
	}
	return conn, resp, err
}

// mustDial opens target, signed, and fails the test unless it is upgraded.
func (e *wsEnv) mustDial(t *testing.T, network, target string, c *creds, extra http.Header) *wsClient {
	t.Helper()
	conn, resp, err := e.wsDial(t, network, target, "", c, extra)
	require.NoError(t, err, "status %v", statusOf(resp))
	return readFrames(conn)
}

func statusOf(resp *http.Response) int {
	if resp == nil {
		return 0
	}
	return resp.StatusCode
}

// wsFrame is one message received.
type wsFrame struct {
	typ  websocket.MessageType
	data []byte
}

// wsClient is a client connection with a reader: the reader answers the
// server's pings and the pongs of the client's own pings.
type wsClient struct {
	conn   *websocket.Conn
	frames chan wsFrame
	done   chan struct{}
	err    error // set before done is closed
}

func readFrames(conn *websocket.Conn) *wsClient {
	c := &wsClient{conn: conn, frames: make(chan wsFrame, 1024), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			typ, data, err := conn.Read(context.Background())
			if err != nil {
				c.err = err
				return
			}
			c.frames <- wsFrame{typ, data}
		}
	}()
	return c
}

// next returns the next frame, failing the test after a generous timeout.
func (c *wsClient) next(t *testing.T) wsFrame {
	t.Helper()
	select {
	case f := <-c.frames:
		return f
	case <-c.done:
		t.Fatalf("connection ended while a frame was expected: %v", c.err)
	case <-time.After(10 * time.Second):
		t.Fatal("no frame within 10s")
	}
	return wsFrame{}
}

// closed waits for the connection to end and returns its error.
func (c *wsClient) closed(t *testing.T) error {
	t.Helper()
	select {
	case <-c.done:
		return c.err
	case <-time.After(10 * time.Second):
		t.Fatal("the connection was not closed within 10s")
		return nil
	}
}

func (c *wsClient) ping(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.conn.Ping(ctx)
}

// parseFrame checks a frame's shape (binary, {"report":{...}} with exactly
// the four documented fields) and returns its report.
func parseFrame(t *testing.T, f wsFrame) Report {
	t.Helper()
	require.Equal(t, websocket.MessageBinary, f.typ, "reports come in binary frames")
	var env map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(f.data, &env), string(f.data))
	require.Len(t, env, 1, string(f.data))
	var fields map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(env["report"], &fields))
	require.Len(t, fields, 4, string(f.data))
	for _, k := range []string{"feedID", "fullReport", "validFromTimestamp", "observationsTimestamp"} {
		require.Contains(t, fields, k)
	}
	var r Report
	require.NoError(t, json.Unmarshal(env["report"], &r))
	assert.True(t, feedid.Canonical(r.FeedID), "a stream ID in canonical form: %q", r.FeedID)
	assert.Regexp(t, `^0x([0-9a-f]{2})+$`, r.FullReport)
	assert.LessOrEqual(t, len(f.data), 32768)
	return r
}

// wsCount returns the WebSocket counters of one network and key.
func wsCount(s *Simulator, network, key string) WSCount {
	for _, c := range s.Counters().WS {
		if c.Network == network && c.Key == key {
			return c
		}
	}
	return WSCount{Network: network, Key: key}
}

// lastOf returns the newest report of feed on network at the clock.
func lastOf(t *testing.T, s *Simulator, network, feed string) int64 {
	t.Helper()
	_, last, ok := s.Window(network, feed)
	require.True(t, ok)
	return last
}

func TestWSFrames(t *testing.T) {
	e := newWSEnv(t, nil)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	aapl := findStream(t, e.sim, Mainnet, "AAPL/USD-RefPrice-Equity-DS-001")
	buidl := findStream(t, e.sim, Mainnet, nameBUIDL) // published 1-3 s late
	hype := findStream(t, e.sim, Mainnet, nameHYPE)   // hidden, and the key may read it
	feeds := []string{btc, aapl, buidl, hype}
	// The Go client's %2C, and a duplicate in capitals: four streams.
	target := "/api/v1/ws?feedIDs=" + strings.Join(feeds, "%2C") + "%2C" + "0x" + strings.ToUpper(btc[2:])
	main := e.mustDial(t, Mainnet, target, org, nil)
	test := e.mustDial(t, Testnet, "/api/v1/ws?feedIDs="+btc, org, nil)

	start := map[string]int64{}
	for _, f := range feeds {
		start[f] = lastOf(t, e.sim, Mainnet, f)
	}
	testStart := lastOf(t, e.sim, Testnet, btc)

	// Each second, every stream's newly published reports, in time order.
	got := map[string][]wsFrame{}
	var testFrames []wsFrame
	prev := start
	const seconds = 4
	for range seconds {
		e.clk.Advance(time.Second)
		want := 0
		cur := map[string]int64{}
		for _, f := range feeds {
			cur[f] = lastOf(t, e.sim, Mainnet, f)
			want += int(cur[f] - prev[f])
		}
		prev = cur
		for range want {
			fr := main.next(t)
			r := parseFrame(t, fr)
			got[r.FeedID] = append(got[r.FeedID], fr)
		}
		testFrames = append(testFrames, test.next(t))
	}

	require.ElementsMatch(t, feeds, keys(got), "a frame for each requested stream, and only those")
	total := 0
	for _, f := range feeds {
		var ts []int64
		for _, fr := range got[f] {
			r := parseFrame(t, fr)
			assert.Equal(t, r.ObservationsTimestamp, r.ValidFromTimestamp)
			ts = append(ts, r.ObservationsTimestamp)
			// The frame is, byte for byte, the REST answer for that second.
			resp, body := e.get(t, Mainnet, "/api/v1/reports?feedID="+f+"&timestamp="+strconv.FormatInt(r.ObservationsTimestamp, 10), org)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			assert.Equal(t, string(body), string(fr.data))
		}
		var want []int64
		for s := start[f] + 1; s <= prev[f]; s++ {
			want = append(want, s)
		}
		assert.Equal(t, want, ts, "stream %s: one report a second, strictly increasing, after its publication delay", f)
		total += len(ts)
	}
	assert.Len(t, got[btc], seconds)

	// The testnet connection serves testnet's reports, which differ.
	require.Len(t, testFrames, seconds)
	for i, fr := range testFrames {
		r := parseFrame(t, fr)
		assert.Equal(t, testStart+int64(i)+1, r.ObservationsTimestamp)
		resp, body := e.get(t, Testnet, "/api/v1/reports?feedID="+btc+"&timestamp="+strconv.FormatInt(r.ObservationsTimestamp, 10), org)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, string(body), string(fr.data))
		assert.NotEqual(t, string(got[btc][i].data), string(fr.data))
	}

	// The clock stands still: nothing more is sent.
	require.Eventually(t, func() bool {
		return wsCount(e.sim, Mainnet, OrgKeyID).Frames >= int64(total) && wsCount(e.sim, Testnet, OrgKeyID).Frames >= seconds
	}, 10*time.Second, time.Millisecond)
	c := wsCount(e.sim, Mainnet, OrgKeyID)
	assert.Equal(t, WSCount{Network: Mainnet, Key: OrgKeyID, Accepted: 1, Open: 1, Frames: int64(total)}, c)
	assert.Equal(t, int64(seconds), wsCount(e.sim, Testnet, OrgKeyID).Frames)
	assert.Equal(t, int64(1), e.sim.Counters().Sum(func(x Count) bool {
		return x.Network == Mainnet && x.Endpoint == EndpointWS && x.Status == http.StatusSwitchingProtocols
	}))
	select {
	case fr := <-main.frames:
		t.Fatalf("unexpected frame %s", fr.data)
	default:
	}

	// A client that closes is gone from the gauge.
	require.NoError(t, main.conn.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, func() bool { return wsCount(e.sim, Mainnet, OrgKeyID).Open == 0 }, 10*time.Second, time.Millisecond)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestWSSigningForms checks the two strings a client may sign: the request
// target as sent, and /api/v1/ws? with the raw query whatever the path.
func TestWSSigningForms(t *testing.T) {
	e := newWSEnv(t, nil)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	eth := findStream(t, e.sim, Mainnet, nameETH)
	raw := "feedIDs=" + btc + "," + eth
	enc := "feedIDs=" + btc + "%2C" + eth
	for _, tc := range []struct {
		name, target, signed string
		status               int
	}{
		{"raw comma, target signed", "/api/v1/ws?" + raw, "", 101},
		{"%2C, target signed", "/api/v1/ws?" + enc, "", 101},
		// The path is spelled differently on the wire: only the second
		// form matches.
		{"raw comma, canonical form signed", "/api/v1/%77s?" + raw, "/api/v1/ws?" + raw, 101},
		{"%2C, canonical form signed", "/api/v1/%77s?" + enc, "/api/v1/ws?" + enc, 101},
		{"target signed with the other comma", "/api/v1/ws?" + raw, "/api/v1/ws?" + enc, 401},
		{"another path signed", "/api/v1/ws?" + raw, "/api/v2/ws?" + raw, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, resp, err := e.wsDial(t, Mainnet, tc.target, tc.signed, org, nil)
			require.Equal(t, tc.status, statusOf(resp))
			if tc.status == 101 {
				require.NoError(t, err)
				conn.Close(websocket.StatusNormalClosure, "")
			} else {
				require.Error(t, err)
			}
		})
	}
}

// TestWSSignatureVectors runs the test vectors of the WebSocket notes
// through the handler: a valid signature gets past authentication (to the
// 401 of streams the simulator does not have), a wrong one does not.
func TestWSSignatureVectors(t *testing.T) {
	const (
		feedA  = "0x000359843a543ee2fe414dc14c7e7920ef10f4372990b79d6361cdc0dd1ba782"
		feedB  = "0x00037da06d56d083fe599397a4769a042d63aa73dc4ef57709d31e9971a5b439"
		sigRaw = "6bf268bf66d540528d4bad7d9dabb7809e8c25a0bed3b9b8b0453e0417ee1948"
		sigEnc = "ac26be5f88326d38e737e3a962ba2bc4af30518d147a7c2fcd997b267217c256"
	)
	s := newTestSim(t, func(c *Config) {
		c.Now = func() time.Time { return time.UnixMilli(1718885772000) }
		c.Keys = append(c.Keys, Key{ID: "clientId", Secret: "userSecret"})
	})
	h := s.Handler(Mainnet)
	serve := func(target, sig string) string {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		req.Header.Set(auth.HeaderAuthorization, "clientId")
		req.Header.Set(auth.HeaderTimestamp, "1718885772000")
		req.Header.Set(auth.HeaderSignature, sig)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return strconv.Itoa(w.Code) + " " + decode[map[string]string](t, w.Body.Bytes())["message"]
	}
	rawQ, encQ := "feedIDs="+feedA+","+feedB, "feedIDs="+feedA+"%2C"+feedB
	authenticated := "401 unauthorized: the stream " + feedA + " does not exist"
	assert.Contains(t, serve("/api/v1/ws?"+rawQ, sigRaw), authenticated)
	assert.Contains(t, serve("/api/v1/ws?"+encQ, sigEnc), authenticated)
	// The Rust client signs /api/v1/ws?... even when its URL has a prefix.
	assert.Contains(t, serve("/prefix/api/v1/ws?"+rawQ, sigRaw), "404 no such endpoint") // not routed here
	r := httptest.NewRequest(http.MethodGet, "/api/v1/%77s?"+rawQ, nil)
	require.Equal(t, "/api/v1/ws", r.URL.Path)
	assert.Contains(t, serve("/api/v1/%77s?"+rawQ, sigRaw), authenticated)
	assert.Contains(t, serve("/api/v1/ws?"+rawQ, sigEnc), "401 authentication failed: signature")
	assert.Contains(t, serve("/api/v1/ws?"+encQ, sigRaw), "401 authentication failed: signature")
}

func TestWSRejects(t *testing.T) {
	e := newWSEnv(t, nil)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	eth := findStream(t, e.sim, Mainnet, nameETH)
	sol := findStream(t, e.sim, Mainnet, nameSOL)
	hype := findStream(t, e.sim, Mainnet, nameHYPE)
	pepe := findStream(t, e.sim, Testnet, "PEPE/USD-RefPrice-DS-Premium-Global-003") // testnet only
	unknown := "0x0003" + strings.Repeat("ab", 30)
	ws := "/api/v1/ws?feedIDs="
	signedAt := func(c *creds, at time.Time, target string) http.Header {
		ms := strconv.FormatInt(at.UnixMilli(), 10)
		return http.Header{
			auth.HeaderAuthorization: {c.id}, auth.HeaderTimestamp: {ms},
			auth.HeaderSignature: {auth.SignatureHex([]byte(c.secret), http.MethodGet, target, auth.EmptyBodyHash, c.id, ms)},
		}
	}
	tests := []struct {
		name   string
		target string
		c      *creds
		extra  http.Header
		status int
		msg    string
	}{
		{name: "no credentials", target: ws + btc, status: 400, msg: "missing authentication headers"},
		{name: "no signature", target: ws + btc, extra: http.Header{auth.HeaderAuthorization: {OrgKeyID}, auth.HeaderTimestamp: {"1"}}, status: 400},
		{name: "malformed ID", target: ws + btc + ",0x12", c: org, status: 400, msg: "malformed parameter feedIDs"},
		{name: "upper-case 0X", target: ws + "0X" + btc[2:], c: org, status: 400, msg: "malformed parameter feedIDs"},
		{name: "empty item", target: ws + btc + ",", c: org, status: 400, msg: "malformed parameter feedIDs"},
		{name: "no feedIDs", target: "/api/v1/ws?feedID=" + btc, c: org, status: 400, msg: "missing parameter feedIDs"},
		{name: "empty feedIDs", target: ws, c: org, status: 400, msg: "missing parameter feedIDs"},
		{name: "feedIDs twice", target: ws + btc + "&feedIDs=" + eth, c: org, status: 400, msg: "more than once"},
		{name: "bad escape", target: ws + btc + "%zz", c: org, status: 400, msg: "malformed query"},
		{name: "bad signature", target: ws + btc, c: &creds{OrgKeyID, "wrong secret"}, status: 401, msg: "signature"},
		{name: "stale timestamp", target: ws + btc, extra: signedAt(org, t0.Add(-6*time.Second), ws+btc), status: 401, msg: "skew"},
		{name: "unknown key", target: ws + btc, c: &creds{"3c1e5f7a-0000-4000-8000-000000000000", "x"}, status: 401, msg: "unknown key"},
		{name: "unknown stream", target: ws + btc + "," + unknown, c: org, status: 401, msg: unknown},
		{name: "stream of the other network", target: ws + pepe, c: org, status: 401},
		{name: "stream the key may not read", target: ws + eth + "," + sol, c: restricted, status: 401, msg: sol},
		{name: "hidden stream not entitled", target: ws + hype, c: restricted, status: 401},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, resp, err := e.wsDial(t, Mainnet, tc.target, "", tc.c, tc.extra)
			require.Error(t, err)
			require.Nil(t, conn)
			require.Equal(t, tc.status, statusOf(resp))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			body, _ := io.ReadAll(resp.Body)
			m := decode[map[string]string](t, body)
			assert.Equal(t, m["error"], m["message"])
			assert.Contains(t, m["message"], tc.msg)
		})
	}
	c := e.sim.Counters()
	assert.Equal(t, int64(len(tests)), c.WSTotal(Mainnet).Refused)
	assert.Zero(t, c.WSTotal(Mainnet).Accepted)
	assert.Equal(t, int64(len(tests)), c.ByEndpoint(Mainnet, EndpointWS))

	// A GET without the upgrade headers, otherwise valid, is 426.
	resp, body := e.get(t, Mainnet, ws+btc, org)
	assert.Equal(t, http.StatusUpgradeRequired, resp.StatusCode)
	assert.Equal(t, "websocket", resp.Header.Get("Upgrade"))
	assert.NotEmpty(t, decode[map[string]string](t, body)["message"])
	// An upgrade the WebSocket library refuses (an old protocol version)
	// is refused, not accepted.
	req := e.request(t, Mainnet, ws+btc, org)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "8")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, _ = e.do(t, req)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	c = e.sim.Counters()
	assert.Zero(t, c.WSTotal(Mainnet).Accepted)
	assert.Zero(t, c.WSTotal(Mainnet).Open)
	assert.Equal(t, int64(len(tests)+2), c.WSTotal(Mainnet).Refused)
	// Other methods are 405.
	req = e.request(t, Mainnet, ws+btc, nil)
	req.Method = http.MethodPost
	auth.Sign(req, org.id, []byte(org.secret), t0)
	resp, _ = e.do(t, req)
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestWSConnLimit(t *testing.T) {
	e := newWSEnv(t, func(c *Config) { c.WSMaxConnsPerKey = 3 })
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	target := "/api/v1/ws?feedIDs=" + btc
	var open []*wsClient
	for range 3 {
		open = append(open, e.mustDial(t, Mainnet, target, org, nil))
	}
	conn, resp, err := e.wsDial(t, Mainnet, target, "", org, nil)
	require.Error(t, err)
	require.Nil(t, conn)
	require.Equal(t, http.StatusTooManyRequests, statusOf(resp))
	body, _ := io.ReadAll(resp.Body)
	assert.Contains(t, decode[map[string]string](t, body)["message"], "at most 3")

	// The limit is per key and per network.
	e.mustDial(t, Mainnet, target, restricted, nil)
	e.mustDial(t, Testnet, target, org, nil)
	openIs := func(n int64) func() bool {
		return func() bool { return wsCount(e.sim, Mainnet, OrgKeyID).Open == n }
	}
	require.Eventually(t, openIs(3), 10*time.Second, time.Millisecond)
	assert.Equal(t, int64(1), wsCount(e.sim, Mainnet, OrgKeyID).Refused)

	// A closed connection frees its slot.
	require.NoError(t, open[0].conn.Close(websocket.StatusNormalClosure, ""))
	require.Eventually(t, openIs(2), 10*time.Second, time.Millisecond)
	e.mustDial(t, Mainnet, target, org, nil)
	require.Eventually(t, openIs(3), 10*time.Second, time.Millisecond)
}

func TestWSHighAvailability(t *testing.T) {
	e := newWSEnv(t, func(c *Config) { c.HAOrigins = []string{"001", "002"} })
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	buidl := findStream(t, e.sim, Mainnet, nameBUIDL)
	target := "/api/v1/ws?feedIDs=" + btc + "," + buidl

	req := e.request(t, Mainnet, "/", nil)
	req.Method = http.MethodHead
	auth.Sign(req, org.id, []byte(org.secret), e.now())
	resp, _ := e.do(t, req)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	origins := strings.Split(strings.Trim(resp.Header.Get(OriginsHeader), "{}"), ",")
	require.Equal(t, []string{"001", "002"}, origins)

	clients := map[string]*wsClient{}
	for _, o := range origins {
		clients[o] = e.mustDial(t, Mainnet, target, org, http.Header{OriginHeader: {o}})
	}
	_, resp, err := e.wsDial(t, Mainnet, target, "", org, http.Header{OriginHeader: {"003"}})
	require.Error(t, err)
	assert.Equal(t, http.StatusBadRequest, statusOf(resp))

	startBTC, startBUIDL := lastOf(t, e.sim, Mainnet, btc), lastOf(t, e.sim, Mainnet, buidl)
	e.clk.Advance(3 * time.Second)
	nBTC, nBUIDL := lastOf(t, e.sim, Mainnet, btc)-startBTC, lastOf(t, e.sim, Mainnet, buidl)-startBUIDL
	require.Equal(t, int64(3), nBTC)
	require.Equal(t, int64(3), nBUIDL)
	want := int(nBTC + nBUIDL)
	got := map[string]map[string][]string{} // origin, feed: frames
	for o, c := range clients {
		got[o] = map[string][]string{}
		for range want {
			fr := c.next(t)
			r := parseFrame(t, fr)
			got[o][r.FeedID] = append(got[o][r.FeedID], string(fr.data))
		}
	}
	assert.Len(t, got["001"][btc], 3)
	assert.Equal(t, got["001"], got["002"], "every origin sends the same bytes")
	assert.Equal(t, int64(2), wsCount(e.sim, Mainnet, OrgKeyID).Accepted)
}

// TestWSOriginWithoutHA: without HA the origin header is ignored.
func TestWSOriginWithoutHA(t *testing.T) {
	e := newWSEnv(t, nil)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	c := e.mustDial(t, Mainnet, "/api/v1/ws?feedIDs="+btc, org, http.Header{OriginHeader: {"001"}})
	e.clk.Advance(time.Second)
	assert.Equal(t, t0.Unix()+1, parseFrame(t, c.next(t)).ObservationsTimestamp)
}

func TestWSDrop(t *testing.T) {
	e := newWSEnv(t, func(c *Config) { c.HAOrigins = []string{"001", "002"} })
	ctl := httptest.NewServer(e.sim.ControlHandler())
	defer ctl.Close()
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	target := "/api/v1/ws?feedIDs=" + btc
	a := e.mustDial(t, Mainnet, target, org, http.Header{OriginHeader: {"001"}})
	b := e.mustDial(t, Mainnet, target, org, http.Header{OriginHeader: {"002"}})
	c := e.mustDial(t, Testnet, target, org, nil)

	// Origin 001 only, with a close frame: 1001, going away.
	assert.Equal(t, 1, e.sim.DropWS(WSDrop{Origin: "001"}))
	err := a.closed(t)
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
	require.NoError(t, b.ping(10*time.Second), "the other origin stays up")

	// Through the control API: testnet, abruptly (no close frame).
	post := func(body string) (int, string) {
		resp, err := http.Post(ctl.URL+"/faults/ws-drop", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := post(`{"network":"testnet","abrupt":true}`)
	require.Equal(t, http.StatusOK, status, body)
	assert.JSONEq(t, `{"dropped":1}`, body)
	err = c.closed(t)
	require.Error(t, err)
	assert.Equal(t, websocket.StatusCode(-1), websocket.CloseStatus(err), "no close frame: %v", err)
	require.NoError(t, b.ping(10*time.Second))

	for _, bad := range []string{`{"network":"devnet"}`, `{"mode":"x"}`, `[`} {
		status, _ := post(bad)
		assert.Equal(t, http.StatusBadRequest, status, bad)
	}
	status, body = post("") // everything
	require.Equal(t, http.StatusOK, status)
	assert.JSONEq(t, `{"dropped":1}`, body)
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(b.closed(t)))

	require.Eventually(t, func() bool { return e.sim.Counters().WSTotal("").Open == 0 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, int64(3), e.sim.Counters().WSTotal("").Dropped)
}

func TestWSStall(t *testing.T) {
	e := newWSEnv(t, func(c *Config) { c.HAOrigins = []string{"001", "002"} })
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	target := "/api/v1/ws?feedIDs=" + btc
	a := e.mustDial(t, Mainnet, target, org, http.Header{OriginHeader: {"001"}})
	b := e.mustDial(t, Mainnet, target, org, http.Header{OriginHeader: {"002"}})
	require.NoError(t, a.ping(10*time.Second))
	const short = 200 * time.Millisecond

	// Stall everything: no pongs, no frames, for open and new connections.
	require.NoError(t, e.sim.SetFaults(Faults{WSStall: true}))
	framesBefore := e.sim.Counters().WSTotal(Mainnet).Frames
	e.clk.Advance(2 * time.Second)
	assert.ErrorIs(t, a.ping(short), context.DeadlineExceeded)
	late := e.mustDial(t, Mainnet, target, org, nil) // the upgrade still succeeds
	assert.ErrorIs(t, late.ping(short), context.DeadlineExceeded)
	assert.Empty(t, a.frames)
	assert.Empty(t, b.frames)
	assert.Equal(t, framesBefore, e.sim.Counters().WSTotal(Mainnet).Frames)

	// The stall ends: the stalled seconds follow, in order, then the rest.
	require.NoError(t, e.sim.SetFaults(Faults{}))
	for _, c := range []*wsClient{a, b} {
		for i := range 2 {
			assert.Equal(t, t0.Unix()+int64(i)+1, parseFrame(t, c.next(t)).ObservationsTimestamp)
		}
	}
	e.clk.Advance(time.Second)
	for _, c := range []*wsClient{a, b, late} {
		require.NoError(t, c.ping(10*time.Second))
		assert.Equal(t, t0.Unix()+3, parseFrame(t, c.next(t)).ObservationsTimestamp)
	}

	// One origin stalls, the other goes on.
	require.NoError(t, e.sim.SetFaults(Faults{WSStall: true, WSStallOrigin: "001"}))
	e.clk.Advance(time.Second)
	assert.Equal(t, t0.Unix()+4, parseFrame(t, b.next(t)).ObservationsTimestamp)
	require.NoError(t, b.ping(10*time.Second))
	assert.Equal(t, t0.Unix()+4, parseFrame(t, late.next(t)).ObservationsTimestamp) // no origin chosen
	assert.ErrorIs(t, a.ping(short), context.DeadlineExceeded)
	assert.Empty(t, a.frames)
	require.NoError(t, e.sim.SetFaults(Faults{}))
	assert.Equal(t, t0.Unix()+4, parseFrame(t, a.next(t)).ObservationsTimestamp)
	require.NoError(t, a.ping(10*time.Second))
}

func TestWSRefuse(t *testing.T) {
	e := newWSEnv(t, nil)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	target := "/api/v1/ws?feedIDs=" + btc
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusForbidden} {
		require.NoError(t, e.sim.SetFaults(Faults{WSRefuse: status}))
		_, resp, err := e.wsDial(t, Mainnet, target, "", org, nil)
		require.Error(t, err)
		require.Equal(t, status, statusOf(resp))
		if status != http.StatusForbidden {
			assert.Equal(t, "1", resp.Header.Get("Retry-After"))
		}
		body, _ := io.ReadAll(resp.Body)
		assert.Contains(t, decode[map[string]string](t, body)["message"], "injected")
	}
	assert.Equal(t, int64(3), wsCount(e.sim, Mainnet, OrgKeyID).Refused)
	// REST is not affected.
	resp, _ := e.get(t, Mainnet, "/api/v1/reports/latest?feedID="+btc, org)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, e.sim.SetFaults(Faults{}))
	e.mustDial(t, Mainnet, target, org, nil)
}

// TestWSServerPings: a client that never answers pings is disconnected.
func TestWSServerPings(t *testing.T) {
	e := newWSEnv(t, func(c *Config) { c.WSPingInterval = 20 * time.Millisecond })
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	conn, _, err := e.wsDial(t, Mainnet, "/api/v1/ws?feedIDs="+btc, "", restricted, nil)
	require.NoError(t, err) // and no reader: pings go unanswered
	require.Eventually(t, func() bool {
		c := wsCount(e.sim, Mainnet, RestrictedKeyID)
		return c.Accepted == 1 && c.Open == 0
	}, 10*time.Second, 5*time.Millisecond)
	_, _, err = conn.Read(context.Background())
	assert.Error(t, err)
}

// TestWSClose: closing the simulator closes its connections (1001).
func TestWSClose(t *testing.T) {
	e := newWSEnv(t, nil)
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	c := e.mustDial(t, Mainnet, "/api/v1/ws?feedIDs="+btc, org, nil)
	require.NoError(t, e.sim.Close())
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(c.closed(t)))
}

// TestWSDefaultTick runs the wall-clock tick: reports follow each whole
// second. It takes about two seconds.
func TestWSDefaultTick(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Now = time.Now })
	we := &wsEnv{env: e}
	btc := findStream(t, e.sim, Mainnet, nameBTC)
	c := we.mustDial(t, Mainnet, "/api/v1/ws?feedIDs="+btc, org, nil)
	first := parseFrame(t, c.next(t)).ObservationsTimestamp
	assert.Equal(t, first+1, parseFrame(t, c.next(t)).ObservationsTimestamp)
}

func TestNewValidatesWS(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		msg    string
	}{
		{func(c *Config) { c.HAOrigins = []string{"001", "001"} }, "duplicate HA origin"},
		{func(c *Config) { c.HAOrigins = []string{"0,1"} }, "HA origin 0"},
		{func(c *Config) { c.HAOrigins = []string{""} }, "HA origin 0"},
		{func(c *Config) { c.WSTick = -1 }, "WSTick"},
		{func(c *Config) { c.WSWriteTimeout = -1 }, "WSWriteTimeout"},
		{func(c *Config) { c.Faults.WSRefuse = 302 }, "WSRefuse"},
	} {
		cfg := Default()
		tc.mutate(&cfg)
		_, err := New(cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.msg)
	}
}

// FuzzWSQuery parses arbitrary /api/v1/ws queries: the parser never
// panics and returns only valid, lowercase, distinct IDs; the handler
// answers a documented status, with JSON, before any upgrade.
func FuzzWSQuery(f *testing.F) {
	s := newTestSim(f, nil)
	h := s.Handler(Mainnet)
	btc := findStream(f, s, Mainnet, nameBTC)
	eth := findStream(f, s, Mainnet, nameETH)
	for _, seed := range []string{
		"feedIDs=" + btc, "feedIDs=" + btc + "," + eth, "feedIDs=" + btc + "%2C" + eth, "feedIDs=" + btc + "%2c" + strings.ToUpper(btc),
		"feedIDs=", "feedIDs=,", "feedIDs=0x12", "feedIDs=" + btc + "&feedIDs=" + eth, "feedIDs=%zz", "a=1;b=2",
		"feedIDs=" + btc + ",0x" + strings.Repeat("0", 64),
	} {
		f.Add(seed)
	}
	allowed := map[int]bool{400: true, 401: true, 426: true}
	f.Fuzz(func(t *testing.T, query string) {
		ids, err := parseWSQuery(query)
		if err == nil {
			if len(ids) == 0 {
				t.Fatalf("%q: no ID and no error", query)
			}
			seen := map[string]bool{}
			for _, id := range ids {
				if !feedid.Canonical(id) || seen[id] {
					t.Fatalf("%q: bad or repeated ID %q in %q", query, id, ids)
				}
				seen[id] = true
			}
			again, err := parseWSQuery("feedIDs=" + strings.Join(ids, "%2C"))
			if err != nil || strings.Join(again, ",") != strings.Join(ids, ",") {
				t.Fatalf("%q: %q does not parse back: %q, %v", query, ids, again, err)
			}
		} else if ids != nil || !errors.As(err, new(wsQueryError)) {
			t.Fatalf("%q: IDs %q with error %v", query, ids, err)
		}

		req, rerr := http.NewRequest(http.MethodGet, "http://sim"+EndpointWS+"?"+query, nil)
		if rerr != nil {
			return
		}
		req.RequestURI = req.URL.RequestURI()
		auth.Sign(req, OrgKeyID, []byte(OrgKeySecret), t0)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if !allowed[w.Code] || !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s: status %d, body %q", req.RequestURI, w.Code, w.Body.String())
		}
		// The signature is valid: 400 is a malformed query, and 401 an
		// unknown stream.
		if _, perr := parseWSQuery(req.URL.RawQuery); (w.Code == 400) != (perr != nil) {
			t.Fatalf("%s: status %d, parse error %v", req.RequestURI, w.Code, perr)
		}
	})
}
