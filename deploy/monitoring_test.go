package deploy

// The alert rules and the dashboard are checked against the metrics the
// gateway really registers: every streamgate_* name they query must exist,
// and every label they match or group by must be one of its labels.

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"streamgate/cache/shared"
	"streamgate/certs"
	"streamgate/don"
	"streamgate/proxy"
	"streamgate/ratelimit"
	"streamgate/realtime"
	"streamgate/redisconn"
	"streamgate/wsgate"
)

// metric is one metric family the gateway exposes.
type metric struct {
	labels    []string // variable and constant label names
	histogram bool     // also exposed as _bucket, _sum and _count
}

// Labels every series carries once scraped.
var targetLabels = []string{"job", "instance"}

// registeredMetrics returns the metric families that proxy.NewMetrics,
// wsgate.NewMetrics, ratelimit.NewMetrics and the others register, plus those cmd/streamgate registers
// itself. Vector metrics appear in a registry's Gather only once a label
// set is used, so the names come from the collectors' descriptions.
func registeredMetrics(t *testing.T) map[string]metric {
	t.Helper()
	rec := &recorder{reg: prometheus.NewRegistry(), metrics: map[string]metric{}}
	proxy.NewMetrics(rec)
	wsgate.NewMetrics(rec)
	if _, err := ratelimit.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	realtime.NewMetrics(rec)
	don.NewMetrics(rec)
	certs.NewMetrics(rec)
	if _, err := shared.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := redisconn.NewMetrics(rec); err != nil {
		t.Fatal(err)
	}
	// Registered by cmd/streamgate (serve.go) next to the cache and the
	// gateway.
	rec.metrics["streamgate_cache_bytes"] = metric{}
	rec.metrics["streamgate_ready"] = metric{}
	return rec.metrics
}

// recorder is a prometheus.Registerer that notes the name, labels and type
// of every collector it registers.
type recorder struct {
	reg     *prometheus.Registry
	metrics map[string]metric
}

var (
	descName   = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	descLabels = regexp.MustCompile(`constLabels: \{([^}]*)\}, variableLabels: \{([^}]*)\}\}$`)
	labelConst = regexp.MustCompile(`^c\((.*)\)$`)
)

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.reg.Register(c); err != nil {
		return err
	}
	_, isHist := c.(prometheus.Histogram)
	if _, ok := c.(*prometheus.HistogramVec); ok {
		isHist = true
	}
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		s := d.String()
		name := descName.FindStringSubmatch(s)
		lbl := descLabels.FindStringSubmatch(s)
		if name == nil || lbl == nil {
			panic("unexpected prometheus.Desc format: " + s)
		}
		var names []string
		for _, pair := range strings.Split(lbl[1], ",") {
			if n, _, ok := strings.Cut(pair, "="); ok {
				names = append(names, n)
			}
		}
		for _, n := range strings.Split(lbl[2], ",") {
			if m := labelConst.FindStringSubmatch(n); m != nil {
				n = m[1]
			}
			if n != "" {
				names = append(names, n)
			}
		}
		r.metrics[name[1]] = metric{labels: names, histogram: isHist}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

var (
	metricRef = regexp.MustCompile(`\bstreamgate_[a-zA-Z0-9_]+`)
	matcher   = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	grouping  = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// checkQuery checks the streamgate metrics of one PromQL expression: each
// exists, each label matcher names one of its labels, and each "by (...)"
// list names labels of the first streamgate metric after it. extra are
// labels the scrape configuration may add.
func checkQuery(t *testing.T, where, expr string, known map[string]metric, extra ...string) {
	t.Helper()
	for _, loc := range metricRef.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		m, ok := lookupMetric(known, name)
		if !ok {
			t.Errorf("%s: %s is not a metric the gateway exposes", where, name)
			continue
		}
		rest := expr[loc[1]:]
		if !strings.HasPrefix(rest, "{") {
			continue
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			t.Errorf("%s: unclosed selector after %s", where, name)
			continue
		}
		for _, mm := range matcher.FindAllStringSubmatch(rest[1:end], -1) {
			if !hasLabel(m, name, mm[1], extra) {
				t.Errorf("%s: %s has no label %q (labels: %v)", where, name, mm[1], m.labels)
			}
		}
	}
	for _, loc := range grouping.FindAllStringSubmatchIndex(expr, -1) {
		next := metricRef.FindString(expr[loc[1]:])
		m, ok := lookupMetric(known, next)
		if !ok {
			continue
		}
		for _, l := range strings.Split(expr[loc[2]:loc[3]], ",") {
			if l = strings.TrimSpace(l); l != "" && !hasLabel(m, next, l, extra) {
				t.Errorf("%s: groups %s by %q, which it lacks (labels: %v)", where, next, l, m.labels)
			}
		}
	}
}

// lookupMetric finds a metric by a name as queried: histograms are queried
// as name_bucket, name_sum and name_count.
func lookupMetric(known map[string]metric, name string) (metric, bool) {
	if m, ok := known[name]; ok {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if m, ok := known[base]; ok && m.histogram {
				return m, true
			}
		}
	}
	return metric{}, false
}

func hasLabel(m metric, name, label string, extra []string) bool {
	return slices.Contains(m.labels, label) || slices.Contains(targetLabels, label) || slices.Contains(extra, label) ||
		label == "le" && strings.HasSuffix(name, "_bucket")
}

// ruleFile is the Prometheus rule file format.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	f, err := os.Open("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var rf ruleFile
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("prometheus/alerts.yaml: %v", err)
	}
	return rf
}

// The alerts operators rely on; deploy/README.md explains each one.
var wantAlerts = []string{
	"StreamgateInstanceDown",
	"StreamgateCertificateExpiresSoon",
	"StreamgateFleetDegraded",
	"StreamgateReplicasNotReady",
	"StreamgateHigh5xxRatio",
	"StreamgateHighP99Latency",
	"StreamgateAuthFailureSpike",
	"StreamgateUpstreamErrors",
	"StreamgateUpstreamBudgetRefusals",
	"StreamgateUpstreamIntegrityFailures",
	"StreamgateUpstreamCredentialRefused",
	"StreamgateReplayRecordFull",
	"StreamgateCacheHitRatioCollapse",
	"StreamgateRedisFailOpen",
	"StreamgateRedisFailClosed",
	"StreamgateTeamThrottled",
	"StreamgateStreamDisconnected",
	"StreamgateStreamsUncarried",
	"StreamgateSlowClients",
}

// templateFuncs stand for Prometheus's template functions, so that the
// annotations can be parsed.
var templateFuncs = template.FuncMap{}

func init() {
	for _, name := range []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp",
		"title", "toUpper", "toLower", "first", "label", "value", "query", "reReplaceAll", "match", "graphLink", "tableLink",
		"args", "safeHtml", "stripPort", "stripDomain", "externalURL", "pathPrefix", "sortByLabel", "strvalue", "parseDuration", "toTime"} {
		templateFuncs[name] = func(...any) any { return nil }
	}
}

func TestAlertRules(t *testing.T) {
	known := registeredMetrics(t)
	rf := loadRules(t)
	if len(rf.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	var names []string
	for _, g := range rf.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: a group needs a name and rules", g.Name)
		}
		for i, r := range g.Rules {
			where := g.Name + "/" + r.Alert
			if r.Alert == "" {
				t.Errorf("%s rule %d: not an alert (record: %q); this file holds alerts only", g.Name, i, r.Record)
				continue
			}
			if slices.Contains(names, r.Alert) {
				t.Errorf("%s: alert name used twice", where)
			}
			names = append(names, r.Alert)
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", where)
			}
			if r.For == "" {
				t.Errorf("%s: no for", where)
			} else if _, err := model.ParseDuration(r.For); err != nil {
				t.Errorf("%s: for %q: %v", where, r.For, err)
			}
			if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
				t.Errorf("%s: severity %q, want critical, warning or info", where, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description"} {
				text := r.Annotations[a]
				if strings.TrimSpace(text) == "" {
					t.Errorf("%s: no %s annotation", where, a)
					continue
				}
				// Prometheus defines $labels, $externalLabels and $value first.
				if _, err := template.New(a).Funcs(templateFuncs).Parse(
					"{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$value := .Value}}" + text); err != nil {
					t.Errorf("%s: %s: %v", where, a, err)
				}
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("%s: unbalanced parentheses in expr", where)
			}
			checkQuery(t, where, r.Expr, known)
		}
	}
	for _, want := range wantAlerts {
		if !slices.Contains(names, want) {
			t.Errorf("alert %s is missing", want)
		}
	}
}

// dashboard is the part of the Grafana JSON model the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	GridPos    struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Metrics the dashboard must show.
var wantDashboardMetrics = []string{
	"streamgate_requests_total",
	"streamgate_request_duration_seconds",
	"streamgate_cache_results_total",
	"streamgate_upstream_requests_total",
	"streamgate_upstream_errors_total",
	"streamgate_upstream_calls_saved_total",
	"streamgate_coalesced_waiters",
	"streamgate_ratelimit_rejections_total",
	"streamgate_auth_failures_total",
	"streamgate_client_clock_skew_seconds",
	"streamgate_cache_bytes",
	"streamgate_redis_errors_total",
	"streamgate_redis_fallbacks_total",
	"streamgate_upstream_budget_waits_total",
	"streamgate_upstream_budget_refusals_total",
	"streamgate_cache_shared_lookups_total",
	"streamgate_cache_shared_fills_saved_total",
	"streamgate_cache_shared_lease_waits_total",
}

func TestDashboard(t *testing.T) {
	known := registeredMetrics(t)
	data, err := os.ReadFile("grafana/streamgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/streamgate.json: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Error("the dashboard needs a title and a uid")
	}
	const ds = "${DS_PROMETHEUS}"
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			hasDS = true
		}
		if v.Datasource != nil && v.Datasource.UID != ds {
			t.Errorf("variable %s: datasource %q, want %q", v.Name, v.Datasource.UID, ds)
		}
		if v.Type == "query" {
			var q struct{ Query string }
			if json.Unmarshal(v.Query, &q) == nil {
				checkQuery(t, "variable "+v.Name, q.Query, known)
			}
		}
	}
	if !hasDS {
		t.Error("no datasource variable DS_PROMETHEUS of type prometheus")
	}

	var queried []string
	ids := map[int]bool{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			where := "panel " + p.Title
			if ids[p.ID] {
				t.Errorf("%s: id %d used twice", where, p.ID)
			}
			ids[p.ID] = true
			if p.GridPos.W <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
				t.Errorf("%s: gridPos %+v does not fit the 24-column grid", where, p.GridPos)
			}
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Title == "" {
				t.Errorf("panel %d has no title", p.ID)
			}
			if p.Datasource == nil || p.Datasource.UID != ds {
				t.Errorf("%s: datasource must be %s", where, ds)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: no query", where)
			}
			for _, tg := range p.Targets {
				if tg.Datasource == nil || tg.Datasource.UID != ds {
					t.Errorf("%s: a query's datasource must be %s", where, ds)
				}
				if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") {
					t.Errorf("%s: unbalanced parentheses in %s", where, tg.Expr)
				}
				checkQuery(t, where, tg.Expr, known)
				for _, name := range metricRef.FindAllString(tg.Expr, -1) {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						if base, ok := strings.CutSuffix(name, suffix); ok && known[base].histogram {
							name = base
						}
					}
					queried = append(queried, name)
				}
			}
		}
	}
	walk(d.Panels)
	for _, want := range wantDashboardMetrics {
		if !slices.Contains(queried, want) {
			t.Errorf("no panel shows %s", want)
		}
	}
}
