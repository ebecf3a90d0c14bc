package status_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"streamgate/config"
	"streamgate/internal/testing/redistest"
	"streamgate/server/servertest"
	"streamgate/status"
)

// notRegistered are the names the sampler reads when present that no
// part of the gateway registers yet.
var notRegistered = map[string]bool{status.MetricGapsUnfilled: true}

// Every metric family the status page reads is registered by a running
// gateway, under that name: one with everything that registers metrics on
// (the limits and the shared cache tier in Redis, the real-time hubs, the
// archive).
// The registry's descriptors are read, so a metric counts before it has
// a sample.
func TestReadMetricsAreRegistered(t *testing.T) {
	limits, cache := redistest.New(t), redistest.New(t)
	env := servertest.Start(t, servertest.Options{Quiet: true, Config: func(c *config.Config) {
		c.RateLimit.Backend = config.BackendRedis
		c.RateLimit.Redis.URL = limits.URL()
		c.Cache.Shared = config.SharedCache{Backend: config.SharedRedis, URL: cache.URL(),
			TTL: time.Hour, MaxEntryBytes: config.MiB, Lease: 2 * time.Second}
		c.Archive.Backend, c.Archive.Path = config.ArchiveBackendPebble, t.TempDir()
	}})

	fqName := regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	registered := map[string]bool{}
	descs := make(chan *prometheus.Desc)
	go func() {
		env.Registry.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		require.NotNil(t, m, "a descriptor without a name: %s", d)
		registered[m[1]] = true
	}
	require.NotEmpty(t, registered)

	read := status.Families()
	require.GreaterOrEqual(t, len(read), 20, "the families the page reads: %v", read)
	for _, name := range read {
		if notRegistered[name] {
			continue
		}
		assert.True(t, registered[name], "the status page reads %s, which the gateway does not register", name)
	}
	for name := range notRegistered {
		assert.Contains(t, read, name, "notRegistered lists %s, which the page does not read", name)
	}
}
