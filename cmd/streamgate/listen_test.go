package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/testport"
)

// TestSharedListenerRoutesByHost puts both networks on one address, told
// apart by Host, next to the free-port listeners of the other tests. (A
// free port, 0, is never shared: the shared address is a port number that
// was free a moment before, and the start is tried again on another one
// if a listener of another test took it in between.)
func TestSharedListenerRoutesByHost(t *testing.T) {
	var (
		addr string
		p    *proc
	)
	err := testport.Free(t, func(free string) error {
		var err error
		addr = free
		p, err = tryStartFiles(t, sharedListenerConfig(addr), nil, []string{"mainnet", "testnet"})
		return err
	})
	require.NoError(t, err)
	assert.Equal(t, "http://"+addr, p.net["mainnet"])
	assert.Equal(t, "http://"+addr, p.net["testnet"])

	for host, want := range map[string]string{"main.streams.test": "mainnet", "test.streams.test": "testnet"} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/api/v1/discovery", nil)
		require.NoError(t, err)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var doc struct {
			Feeds []struct {
				NetworkType string `json:"networkType"`
			} `json:"feeds"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
		resp.Body.Close()
		cancel()
		require.Equal(t, http.StatusOK, resp.StatusCode, host)
		require.NotEmpty(t, doc.Feeds)
		assert.Equal(t, want, doc.Feeds[0].NetworkType, host)
	}
}

// sharedListenerConfig has both networks listen on addr, told apart by
// Host.
func sharedListenerConfig(addr string) string {
	return fmt.Sprintf(`server:
  admin_listen: "127.0.0.1:0"
networks:
  mainnet:
    listen: %[1]q
    hosts: [main.streams.test]
  testnet:
    listen: %[1]q
    hosts: [test.streams.test]
teams:
  - name: demo
    networks: [mainnet, testnet]
    feeds: ["*"]
    keys: [{id: %[2]s, secret: %[3]s}]
`, addr, config.DemoKeyID, config.DemoKeySecret)
}

// A start on an address another socket holds fails with
// syscall.EADDRINUSE, which is what has TestSharedListenerRoutesByHost
// try another port.
func TestStartOnAddressInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	_, err = tryStartFiles(t, sharedListenerConfig(taken.Addr().String()), nil, []string{"mainnet", "testnet"})
	require.ErrorIs(t, err, syscall.EADDRINUSE)
}
