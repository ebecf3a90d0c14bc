//go:build !nosimulator

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/config"
	"streamgate/server"
	"streamgate/upstreamsim"
)

// TestDemoBannerPrintsEveryTeamsKey starts the demo configuration on free
// loopback ports and checks that its banner shows the key and secret of
// every team of it, not only the first.
func TestDemoBannerPrintsEveryTeamsKey(t *testing.T) {
	cfg := config.Default()
	cfg.Server.AdminListen = "127.0.0.1:0"
	for _, n := range cfg.Networks {
		n.Listen = "127.0.0.1:0"
	}
	srv, err := server.New(cfg, server.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Shutdown(t.Context()) })
	var out bytes.Buffer
	printDemo(&out, srv, cfg)
	banner := out.String()
	require.GreaterOrEqual(t, len(cfg.Teams), 2, "the demo has two teams")
	for _, team := range cfg.Teams {
		assert.Contains(t, banner, `Team "`+team.Name+`"`)
		for _, k := range team.Keys {
			assert.Contains(t, banner, "export STREAMGATE_KEY="+k.ID)
			for _, s := range k.Secrets() {
				assert.Contains(t, banner, "export STREAMGATE_SECRET="+s.Reveal())
			}
		}
	}
	assert.Contains(t, banner, config.ResearchKeyID)
	assert.Contains(t, banner, `Team "research" (testnet only; 5 streams)`)
	assert.False(t, strings.Contains(banner, "defaults.go"))
	// A live stream of every schema, to read with get -decode.
	assert.Contains(t, banner, "go run ./cmd/streamgate get -decode -url http://")
	for _, sc := range upstreamsim.Schemas {
		assert.Regexp(t, `(?m)^  `+sc.String()+` +0x`+fmt.Sprintf("%04x", uint16(sc))+`[0-9a-f]{60}  \S+$`, banner, "a stream of %s", sc)
	}
}

// TestDemoArchivesAcrossRestarts: the demo archives into a Pebble
// directory of its own in the user's cache directory; a report fetched in
// one run is served from there in the next, with no upstream call.
func TestDemoArchivesAcrossRestarts(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
	var target, first string
	for run := range 2 {
		cfg, _, err := demoSetup()
		require.NoError(t, err)
		require.Equal(t, config.ArchiveBackendPebble, cfg.Archive.Backend)
		require.True(t, strings.HasSuffix(cfg.Archive.Path, "/streamgate/demo-archive"), cfg.Archive.Path)
		cfg.Server.AdminListen = ""
		for _, n := range cfg.Networks {
			n.Listen = "127.0.0.1:0"
		}
		srv, err := server.New(cfg, server.Options{})
		require.NoError(t, err)
		srv.Start()
		<-srv.Warmed()
		if target == "" {
			target = fmt.Sprintf("/api/v1/reports?feedID=%s&timestamp=%d", exampleFeed(srv.Simulator()), time.Now().Unix()-30)
		}
		srv.Simulator().ResetCounters()
		req, err := http.NewRequest(http.MethodGet, "http://"+srv.Addr("mainnet")+target, nil)
		require.NoError(t, err)
		auth.Sign(req, config.DemoKeyID, []byte(config.DemoKeySecret), time.Now())
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		calls := srv.Simulator().Counters().Sum(func(c upstreamsim.Count) bool { return c.Endpoint == upstreamsim.EndpointReport })
		if run == 0 {
			first = string(body)
			assert.Equal(t, "MISS", resp.Header.Get("X-Cache"))
			require.NoError(t, srv.FlushArchive(context.Background()))
		} else {
			assert.Equal(t, "HIT", resp.Header.Get("X-Cache"))
			assert.Equal(t, int64(0), calls)
			assert.Equal(t, first, string(body))
		}
		_ = srv.Close()
	}
}
