package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"streamgate/config"
	"streamgate/upstreamsim"
)

// composeFile is the part of compose.yaml the test reads. yaml.v3 resolves
// the anchors and merge keys that the replicas share.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Build       *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
		Target     string `yaml:"target"`
	} `yaml:"build"`
}

// prometheusConfig is the part of prometheus.yml the test reads.
type prometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

var replicas = []string{"streamgate-1", "streamgate-2", "streamgate-3"}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// mountSource returns the host path (relative to compose/) mounted at
// target by a service, or "".
func mountSource(s composeService, target string) string {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && parts[1] == target {
			return parts[0]
		}
	}
	return ""
}

func flagValue(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}

func TestCompose(t *testing.T) {
	var cf composeFile
	readYAML(t, "compose/compose.yaml", &cf)

	sim, ok := cf.Services["streams-sim"]
	if !ok {
		t.Fatal("no streams-sim service")
	}
	if sim.Build == nil || sim.Build.Target != "streams-sim" || sim.Build.Dockerfile != "deploy/Dockerfile" {
		t.Errorf("streams-sim must be built from deploy/Dockerfile, target streams-sim")
	}
	simPorts := map[string]string{} // network → port
	for _, network := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
		addr := flagValue(sim.Command, "-"+network)
		if _, port, err := net.SplitHostPort(addr); err != nil {
			t.Errorf("streams-sim: -%s %q: %v", network, addr, err)
		} else {
			simPorts[network] = port
		}
	}
	redis, ok := cf.Services["redis"]
	if !ok {
		t.Fatal("no redis service")
	}
	redisPassword := flagValue(redis.Command, "--requirepass")
	cacheRedis, ok := cf.Services["cache-redis"]
	if !ok {
		t.Fatal("no cache-redis service: the shared cache needs a Redis of its own")
	}
	cachePassword := flagValue(cacheRedis.Command, "--requirepass")
	if flagValue(cacheRedis.Command, "--maxmemory") == "" {
		t.Error("cache-redis has no --maxmemory: a cache must be bounded")
	}
	if p := flagValue(cacheRedis.Command, "--maxmemory-policy"); !strings.HasPrefix(p, "allkeys-") {
		t.Errorf("cache-redis --maxmemory-policy %q: every key of it is a cache entry, evict any (allkeys-lru)", p)
	}
	if p := flagValue(redis.Command, "--maxmemory-policy"); strings.HasPrefix(p, "allkeys-") {
		t.Error("redis (limits, replay record) must not evict any key")
	}

	var (
		redisURLs []string
		cacheURLs []string
		adminPort string
	)
	for _, name := range replicas {
		s, ok := cf.Services[name]
		if !ok {
			t.Errorf("no service %s", name)
			continue
		}
		if s.Build == nil || s.Build.Target != "streamgate" || s.Build.Dockerfile != "deploy/Dockerfile" || filepath.Clean(filepath.Join("compose", s.Build.Context)) != ".." {
			t.Errorf("%s must be built from deploy/Dockerfile, target streamgate, context the repository root", name)
		}
		if s.Image != cf.Services[replicas[0]].Image {
			t.Errorf("%s runs image %q, %s runs %q: the replicas must be identical", name, s.Image, replicas[0], cf.Services[replicas[0]].Image)
		}
		cfgFile := mountSource(s, "/etc/streamgate/config.yaml")
		if cfgFile == "" {
			t.Errorf("%s: nothing mounted at /etc/streamgate/config.yaml", name)
			continue
		}
		if p := configPathFromArgs(t, s.Command); p != "/etc/streamgate/config.yaml" {
			t.Errorf("%s reads %s", name, p)
		}
		data, err := os.ReadFile(filepath.Join("compose", cfgFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range configVars(string(data)) {
			if _, ok := s.Environment[v]; !ok {
				t.Errorf("%s: ${%s} is not in its environment", name, v)
			}
		}
		cfg, err := config.Parse(data, func(k string) (string, bool) {
			v, ok := s.Environment[k]
			return v, ok
		})
		if err != nil {
			t.Errorf("%s: %s is not a valid configuration:\n%v", name, cfgFile, err)
			continue
		}
		if cfg.RateLimit.Backend != "redis" {
			t.Errorf("%s: ratelimit.backend %q, want redis", name, cfg.RateLimit.Backend)
		}
		for _, netName := range cfg.NetworkNames() {
			if cfg.Networks[netName].Upstream.Embedded() {
				t.Errorf("%s: networks.%s.upstream.url is embedded, which the image (-tags nosimulator) refuses", name, netName)
			}
		}
		// The replicas trust the DON of the streams-sim service, exactly.
		sim, err := upstreamsim.New(upstreamsim.Default())
		if err != nil {
			t.Fatal(err)
		}
		for _, netName := range []string{upstreamsim.Mainnet, upstreamsim.Testnet} {
			n := cfg.Networks[netName]
			if n.VerifyMode() != config.VerifyEnforce {
				t.Errorf("%s: networks.%s.verify.mode %q, want enforce", name, netName, n.VerifyMode())
			}
			var want []config.DON
			for _, c := range sim.DON(netName) {
				want = append(want, config.DON{ConfigDigest: c.ConfigDigest, F: c.F, Signers: c.Signers})
			}
			if got := n.Verify.AllDONs(); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: networks.%s.verify.dons are not the simulator's DON:\n got %v\nwant %v", name, netName, got, want)
			}
		}
		redisURLs = append(redisURLs, cfg.RateLimit.Redis.URL)
		u, err := url.Parse(cfg.RateLimit.Redis.URL)
		if err != nil || u.Hostname() != "redis" {
			t.Errorf("%s: ratelimit.redis.url %q does not name the redis service", name, cfg.RateLimit.Redis.URL)
		}
		if cfg.RateLimit.Redis.Password.Reveal() != redisPassword {
			t.Errorf("%s: ratelimit.redis.password is not the redis service's --requirepass", name)
		}
		sh := cfg.Cache.Shared
		if sh.Backend != config.SharedRedis {
			t.Errorf("%s: cache.shared.backend %q, want redis: the replicas share their cache", name, sh.Backend)
		}
		cacheURLs = append(cacheURLs, sh.URL)
		if u, err := url.Parse(sh.URL); err != nil || u.Hostname() != "cache-redis" {
			t.Errorf("%s: cache.shared.url %q does not name the cache-redis service", name, sh.URL)
		}
		if sh.Password.Reveal() != cachePassword {
			t.Errorf("%s: cache.shared.password is not the cache-redis service's --requirepass", name)
		}
		for _, network := range cfg.NetworkNames() {
			up := cfg.Networks[network].Upstream
			u, err := url.Parse(up.URL)
			if err != nil || u.Hostname() != "streams-sim" || u.Port() != simPorts[network] {
				t.Errorf("%s: networks.%s.upstream.url %q is not the simulator's %s port %s", name, network, up.URL, network, simPorts[network])
			}
			if up.APIKey != upstreamsim.OrgKeyID || up.APISecret.Reveal() != upstreamsim.OrgKeySecret {
				t.Errorf("%s: networks.%s.upstream credentials are not the simulator's organisation key", name, network)
			}
		}
		_, adminPort, _ = net.SplitHostPort(cfg.Server.AdminListen)
		if host, _, _ := net.SplitHostPort(cfg.Server.AdminListen); host == "127.0.0.1" || host == "localhost" {
			t.Errorf("%s: server.admin_listen %q is loopback: Prometheus could not scrape it", name, cfg.Server.AdminListen)
		}
	}
	if len(redisURLs) != len(replicas) || len(slices.Compact(slices.Clone(redisURLs))) != 1 {
		t.Errorf("the replicas must share one Redis URL, got %v", redisURLs)
	}
	if len(cacheURLs) != len(replicas) || len(slices.Compact(slices.Clone(cacheURLs))) != 1 {
		t.Errorf("the replicas must share one cache Redis URL, got %v", cacheURLs)
	}

	front, ok := cf.Services["front"]
	if ok {
		conf, err := os.ReadFile(filepath.Join("compose", mountSource(front, "/etc/nginx/nginx.conf")))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range replicas {
			for _, port := range []string{"8080", "8081"} {
				if !strings.Contains(string(conf), "server "+r+":"+port) {
					t.Errorf("nginx.conf does not send port %s to %s", port, r)
				}
			}
		}
	}

	t.Run("prometheus", func(t *testing.T) {
		prom, ok := cf.Services["prometheus"]
		if !ok {
			t.Fatal("no prometheus service")
		}
		var pc prometheusConfig
		readYAML(t, filepath.Join("compose", mountSource(prom, "/etc/prometheus/prometheus.yml")), &pc)
		var targets []string
		for _, sc := range pc.ScrapeConfigs {
			if sc.JobName != "streamgate" { // the alert rules select job="streamgate"
				continue
			}
			for _, st := range sc.StaticConfigs {
				targets = append(targets, st.Targets...)
			}
		}
		var want []string
		for _, r := range replicas {
			want = append(want, net.JoinHostPort(r, adminPort))
		}
		if !slices.Equal(slices.Sorted(slices.Values(targets)), want) {
			t.Errorf("job streamgate scrapes %v, want the three replicas' admin ports %v", targets, want)
		}
		if len(pc.RuleFiles) == 0 {
			t.Fatal("no rule_files: the alert rules are not loaded")
		}
		for _, rf := range pc.RuleFiles {
			src := mountSource(prom, rf)
			if filepath.Clean(filepath.Join("compose", src)) != filepath.Join("prometheus", "alerts.yaml") {
				t.Errorf("rule file %s is mounted from %q, not deploy/prometheus/alerts.yaml", rf, src)
			}
		}
	})

	t.Run("grafana", func(t *testing.T) {
		g, ok := cf.Services["grafana"]
		if !ok {
			t.Skip("no grafana service")
		}
		src := mountSource(g, "/var/lib/grafana/dashboards/streamgate.json")
		if filepath.Clean(filepath.Join("compose", src)) != filepath.Join("grafana", "streamgate.json") {
			t.Errorf("the dashboard is mounted from %q, not deploy/grafana/streamgate.json", src)
		}
		for _, v := range g.Volumes {
			if p := strings.Split(v, ":")[0]; strings.HasPrefix(p, ".") {
				if _, err := os.Stat(filepath.Join("compose", p)); err != nil {
					t.Errorf("grafana mounts %s: %v", p, err)
				}
			}
		}
	})

}
