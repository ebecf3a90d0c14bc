package proxy_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/internal/testing/testport"
	"streamgate/server/servertest"
)

func rawGet(t *testing.T, base string, c *servertest.Client, method, target string, extra string) (*http.Response, []byte) {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	req := method + " " + target + " HTTP/1.1\r\nHost: " + u.Host + "\r\n"
	if c != nil {
		hr, err := http.NewRequest(method, base+"/", nil)
		require.NoError(t, err)
		hr.URL.Opaque = target // sign the target as written
		hr.RequestURI = ""
		sign(hr, c, target)
		for _, h := range []string{auth.HeaderAuthorization, auth.HeaderTimestamp, auth.HeaderSignature} {
			req += h + ": " + hr.Header.Get(h) + "\r\n"
		}
	}
	req += extra + "\r\n"
	_, err = io.WriteString(conn, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: method})
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

func sign(req *http.Request, c *servertest.Client, target string) {
	// auth.Sign signs req.URL.RequestURI(); an opaque URL keeps the target
	// exactly as given.
	req.URL = &url.URL{Scheme: "http", Host: req.URL.Host, Opaque: target}
	if strings.Contains(target, "?") {
		path, q, _ := strings.Cut(target, "?")
		req.URL.Opaque, req.URL.RawQuery = path, q
	}
	auth.Sign(req, c.Key, []byte(c.Secret), time.Now())
}

func newServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func do(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req.Clone(req.Context()))
	require.NoError(t, err)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// startSharedListener starts a gateway as opts say, with both networks on
// one listener, told apart by Host (mainnet.streams.internal,
// testnet.streams.internal), and returns it with the listener's address.
// A free port (0) is never shared: the address is a port that was free a
// moment before, and the start is tried again on another one if a
// listener of another test took it in between.
func startSharedListener(t *testing.T, opts servertest.Options) (*servertest.Env, string) {
	t.Helper()
	var (
		env    *servertest.Env
		shared string
	)
	err := testport.Free(t, func(addr string) error {
		o := opts
		o.Config = func(c *config.Config) {
			if opts.Config != nil {
				opts.Config(c)
			}
			c.Networks["mainnet"].Listen = addr
			c.Networks["mainnet"].Hosts = []string{"mainnet.streams.internal"}
			c.Networks["testnet"].Listen = addr
			c.Networks["testnet"].Hosts = []string{"testnet.streams.internal"}
		}
		var err error
		env, err = servertest.TryStart(t, o)
		shared = addr
		return err
	})
	require.NoError(t, err)
	return env, shared
}
