package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/auth"
	"streamgate/simulator"
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
	assert.Contains(t, out.String(), simulator.OrgKeyID)
	assert.Contains(t, out.String(), simulator.OrgKeySecret)

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

	req, _ = http.NewRequest(http.MethodGet, mainnet+"/api/v1/reports/latest?feedID="+simulator.RestrictedStreams()[0], nil)
	auth.Sign(req, simulator.OrgKeyID, []byte(simulator.OrgKeySecret), time.Now())
	status, body = get(req)
	assert.Equal(t, http.StatusOK, status, string(body))

	req, _ = http.NewRequest(http.MethodGet, control+"/counters", nil)
	status, body = get(req)
	require.Equal(t, http.StatusOK, status)
	var c struct{ Total int64 }
	require.NoError(t, json.Unmarshal(body, &c))
	assert.Equal(t, int64(2), c.Total)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
	assert.Contains(t, out.String(), "stopped")
}

func TestRunRejectsBadFlags(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"-error-rate", "2", "-mainnet", "127.0.0.1:0", "-testnet", "127.0.0.1:0", "-control", "127.0.0.1:0"}, &out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ErrorRate")
	err = run(context.Background(), []string{"-no-such-flag"}, io.Discard)
	assert.Error(t, err)
}
