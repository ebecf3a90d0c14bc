package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/upstreamsim"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-mainnet", "127.0.0.1:0", "-testnet", "127.0.0.1:0", "-control", "127.0.0.1:0", "-error-rate", "0"}, &out)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "Ctrl-C stops") }, 20*time.Second, 5*time.Millisecond)

	addr := func(name string) string {
		m := regexp.MustCompile(`(?m)^  ` + name + `\s+(http://127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
		require.Len(t, m, 2, "address of %s in:\n%s", name, out.String())
		return m[1]
	}
	mainnet, testnet, control := addr("mainnet"), addr("testnet"), addr("control")
	assert.Contains(t, out.String(), upstreamsim.OrgKeyID)
	assert.Contains(t, out.String(), upstreamsim.OrgKeySecret)

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(req *http.Request) (int, []byte) {
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}

	req, _ := http.NewRequest(http.MethodGet, testnet+"/api/v1/discovery", nil)
	status, body := get(req)
	assert.Equal(t, http.StatusOK, status)
	assert.Contains(t, string(body), `"networkType":"testnet"`)

	req, _ = http.NewRequest(http.MethodGet, mainnet+"/api/v1/reports/latest?feedID="+upstreamsim.RestrictedStreams()[0], nil)
	auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
	status, body = get(req)
	assert.Equal(t, http.StatusOK, status, string(body))

	// Without -ha-origins, HEAD / advertises no origin.
	req, _ = http.NewRequest(http.MethodHead, mainnet+"/", nil)
	auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
	status, _ = get(req)
	assert.Equal(t, http.StatusOK, status)

	// The WebSocket stream: a report of the next second arrives.
	target := "/api/v1/ws?feedIDs=" + upstreamsim.RestrictedStreams()[0]
	hdr := http.Header{}
	ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
	hdr.Set(auth.HeaderAuthorization, upstreamsim.OrgKeyID)
	hdr.Set(auth.HeaderTimestamp, ts)
	hdr.Set(auth.HeaderSignature, auth.SignatureHex([]byte(upstreamsim.OrgKeySecret), http.MethodGet, target, auth.EmptyBodyHash, upstreamsim.OrgKeyID, ts))
	dialCtx, dialCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dialCancel()
	ws, _, err := websocket.Dial(dialCtx, "ws"+strings.TrimPrefix(mainnet, "http")+target, &websocket.DialOptions{HTTPHeader: hdr})
	require.NoError(t, err)
	defer ws.CloseNow()
	typ, frame, err := ws.Read(dialCtx)
	require.NoError(t, err)
	assert.Equal(t, websocket.MessageBinary, typ)
	assert.Contains(t, string(frame), `{"report":{"feedID":"`+upstreamsim.RestrictedStreams()[0])

	req, _ = http.NewRequest(http.MethodGet, control+"/counters", nil)
	status, body = get(req)
	require.Equal(t, http.StatusOK, status)
	var c struct {
		Total int64
		WS    []upstreamsim.WSCount
	}
	require.NoError(t, json.Unmarshal(body, &c))
	assert.Equal(t, int64(4), c.Total)
	require.Len(t, c.WS, 1)
	assert.Equal(t, int64(1), c.WS[0].Open)

	// Stopping closes the WebSocket connection: going away.
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
	assert.Contains(t, out.String(), "stopped")
	_, _, err = ws.Read(dialCtx)
	assert.Equal(t, websocket.StatusGoingAway, websocket.CloseStatus(err), "%v", err)
}

func TestRunHA(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-mainnet", "127.0.0.1:0", "-testnet", "127.0.0.1:0", "-control", "127.0.0.1:0",
			"-ha-origins", "001,002", "-ws-max-conns", "0"}, &out)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "Ctrl-C stops") }, 20*time.Second, 5*time.Millisecond)
	assert.Contains(t, out.String(), "HA: origins 001,002")
	assert.Contains(t, out.String(), "websocket connections: no cap")
	m := regexp.MustCompile(`(?m)^  testnet\s+(http://127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
	require.Len(t, m, 2)
	req, _ := http.NewRequest(http.MethodHead, m[1]+"/", nil)
	auth.Sign(req, upstreamsim.OrgKeyID, []byte(upstreamsim.OrgKeySecret), time.Now())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "{001,002}", resp.Header.Get(upstreamsim.OriginsHeader))
	cancel()
	require.NoError(t, <-done)
}

func TestRunRejectsBadFlags(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-error-rate", "2", "-mainnet", "127.0.0.1:0", "-testnet", "127.0.0.1:0", "-control", "127.0.0.1:0"}, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ErrorRate")
	err = run(context.Background(), []string{"-no-such-flag"}, io.Discard)
	assert.Error(t, err)
}
