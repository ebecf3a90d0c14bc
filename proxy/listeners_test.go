package proxy_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"streamgate/config"
	"streamgate/proxy"
	"streamgate/server/servertest"
	"streamgate/upstreamsim"
)

// TestSharedListener routes two networks on one address by Host name.
func TestSharedListener(t *testing.T) {
	env, shared := startSharedListener(t, servertest.Options{})
	listeners := env.Gateway.Listeners()
	require.Len(t, listeners, 1)
	assert.Equal(t, proxy.Listener{Addr: shared, Networks: []string{"mainnet", "testnet"}}, proxy.Listener{Addr: listeners[0].Addr, Networks: listeners[0].Networks})
	srv := httptest.NewServer(listeners[0].Handler)
	t.Cleanup(srv.Close)

	for host, want := range map[string]string{"mainnet.streams.internal": "mainnet", "TESTNET.streams.internal:7000": "testnet"} {
		req, err := servertest.Demo().Request(t.Context(), srv.URL, "/api/v1/discovery?asset_class=Crypto")
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var disc struct {
			Feeds []struct {
				NetworkType string `json:"networkType"`
			} `json:"feeds"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&disc))
		resp.Body.Close()
		require.NotEmpty(t, disc.Feeds)
		assert.Equal(t, want, disc.Feeds[0].NetworkType, "Host %s", host)
	}
	req, _ := servertest.Demo().Request(t.Context(), srv.URL, "/api/v1/discovery")
	req.Host = "elsewhere.internal"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "an unknown Host reaches no network")
}

// TestLogs checks the access and audit lines, and that no secret is logged.
func TestLogs(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	env := servertest.Start(t, servertest.Options{
		Config: func(c *config.Config) { c.Log.Audit = true },
		Logger: zap.New(core),
	})
	demo := servertest.Demo()
	btc := env.FeedID(t, upstreamsim.Mainnet, "BTC", "USD", "V3")
	resp, _ := demo.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	bad := &servertest.Client{Key: config.DemoKeyID, Secret: "a-wrong-secret-0123456789", HTTP: http.DefaultClient}
	resp, _ = bad.Get(t, env.Mainnet, "/api/v1/reports/latest?feedID="+btc)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	access := logs.FilterMessage("request").AllUntimed()
	require.Len(t, access, 2)
	ok := access[0].ContextMap()
	assert.Equal(t, "mainnet", ok["network"])
	assert.Equal(t, "demo", ok["team"])
	assert.Equal(t, config.DemoKeyID, ok["key_id"])
	assert.Equal(t, "latest", ok["endpoint"])
	assert.EqualValues(t, 200, ok["status"])
	assert.Equal(t, "MISS", ok["cache"])
	assert.EqualValues(t, 1, ok["upstream_calls"], "the report: the catalog was loaded by the warm-up at start")
	assert.NotEmpty(t, ok["request_id"])
	assert.Equal(t, "bad_signature", access[1].ContextMap()["auth_error"])

	audit := logs.FilterLoggerName("audit").AllUntimed()
	require.Len(t, audit, 1, "one audit line per read, none for the refused request")
	assert.Equal(t, []any{btc}, audit[0].ContextMap()["feeds"])

	for _, e := range logs.AllUntimed() {
		line, err := json.Marshal(e.ContextMap())
		require.NoError(t, err)
		for _, secret := range []string{config.DemoKeySecret, "a-wrong-secret", upstreamsim.OrgKeySecret, upstreamsim.OrgKeyID} {
			assert.False(t, strings.Contains(string(line)+e.Message, secret), "a log line holds a secret: %s", line)
		}
	}
}

// TestReload swaps keys and lifetimes while serving; a signature used
// before a reload is still a replay after it.
func TestReload(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) { c.Auth.ReplayGrace = 0 }})
	newKey := &servertest.Client{Key: "added-key", Secret: "added-secret-0123456789", HTTP: http.DefaultClient}
	resp, _ := newKey.Get(t, env.Mainnet, "/api/v1/feeds")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "unknown before the reload")

	req, err := servertest.Demo().Request(t.Context(), env.Mainnet, "/api/v1/feeds")
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req.Clone(req.Context()))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	next := *env.Config
	next.Teams = append([]config.Team{}, env.Config.Teams...)
	next.Teams[0].Keys = append([]config.Key{{ID: "added-key", Secret: "added-secret-0123456789"}}, next.Teams[0].Keys...)
	require.NoError(t, env.Gateway.Reload(&next))

	resp, _ = newKey.Get(t, env.Mainnet, "/api/v1/feeds")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "known after the reload")
	resp, err = http.DefaultClient.Do(req.Clone(req.Context()))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a replay across a reload is still a replay")

	bad := next
	bad.Teams = append(append([]config.Team{}, next.Teams...), next.Teams[0]) // a duplicate team
	assert.Error(t, env.Gateway.Reload(&bad), "an invalid configuration is refused")
	resp, _ = newKey.Get(t, env.Mainnet, "/api/v1/feeds?hidden=true")
	assert.Equal(t, http.StatusOK, resp.StatusCode, "and the one in force stays")
}

func TestListenersOnFreePorts(t *testing.T) {
	env := servertest.Start(t, servertest.Options{Config: func(c *config.Config) {
		c.Networks["mainnet"].Listen = "127.0.0.1:0"
		c.Networks["testnet"].Listen = "127.0.0.1:0"
	}})
	ls := env.Gateway.Listeners()
	require.Len(t, ls, 2, "a free port is never shared")
	assert.Equal(t, []string{"mainnet"}, ls[0].Networks)
	assert.Equal(t, []string{"testnet"}, ls[1].Networks)
}

// A gateway started on an address another socket holds fails with
// syscall.EADDRINUSE, which is what has startSharedListener try another
// port.
func TestStartOnAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	_, err = servertest.TryStart(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		c.Networks["mainnet"].Listen = taken.Addr().String()
	}})
	require.ErrorIs(t, err, syscall.EADDRINUSE)
}

func TestUnknownHostObserved(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	env, _ := startSharedListener(t, servertest.Options{Logger: zap.New(core)})
	l := env.Gateway.Listeners()
	require.Len(t, l, 1)
	srv := newServer(t, l[0].Handler)
	req, _ := http.NewRequest(http.MethodGet, srv+"/api/v1/feeds", nil)
	req.Host = "elsewhere.internal"
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("X-Request-Id"))
	lines := logs.FilterMessage("request").AllUntimed()
	require.Len(t, lines, 1)
	assert.Equal(t, "unknown-host", lines[0].ContextMap()["network"])
	assert.EqualValues(t, 404, lines[0].ContextMap()["status"])
	assert.Equal(t, 1.0, metricValue(t, env.Registry, "streamgate_requests_total",
		map[string]string{"network": "unknown-host", "endpoint": "feeds", "code": "404", "team": "anonymous"}))
}

func TestServerReadTimeout(t *testing.T) {
	readErr := make(chan error, 1)
	s := config.Default().Server
	s.ReadTimeout = 300 * time.Millisecond
	srv := proxy.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		readErr <- err
	}), s, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
	require.NoError(t, err)
	select {
	case err := <-readErr:
		var ne net.Error
		require.ErrorAs(t, err, &ne)
		assert.True(t, ne.Timeout(), "the body read ends with the read timeout: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the server waited for the body past its read timeout")
	}
	assert.Equal(t, config.Default().Server.WriteTimeout, srv.WriteTimeout)
}
