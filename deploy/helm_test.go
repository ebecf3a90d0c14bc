package deploy

// The Helm chart is checked without a cluster and without the helm binary,
// with Helm's own Go library: the chart loader, the values coalescing and
// the template engine that helm template and helm install use, and the
// linter of helm lint. Another template engine would test other templates.
// Every rendered object is then decoded strictly into its k8s.io/api type,
// as TestKubernetes decodes the plain manifests; the configuration the
// chart renders is loaded with package config, as streamgate check does;
// and the chart's gateway is compared with the plain manifests'.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"streamgate/config"
	"streamgate/internal/testing/testpki"
)

const (
	chartDir       = "helm/streamgate"
	releaseName    = "streamgate"
	releaseNS      = "streamgate"
	productionVals = "values-production.yaml"
)

// The Kubernetes version the chart is rendered and linted for: the oldest
// it supports (Chart.yaml's kubeVersion; the preStop sleep action).
var chartKubeVersion = &chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}

// serviceMonitor and prometheusRule are the fields of the Prometheus
// Operator's monitoring.coreos.com/v1 kinds that the chart uses, under the
// operator's names. Decoded strictly, a misspelt or misplaced key fails as
// it would against the operator's CRD schema. The operator's Go module is
// not a dependency for two kinds.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			Relabelings   []struct {
				Action       string   `json:"action,omitempty"`
				SourceLabels []string `json:"sourceLabels,omitempty"`
				Regex        string   `json:"regex,omitempty"`
				TargetLabel  string   `json:"targetLabel,omitempty"`
				Replacement  *string  `json:"replacement,omitempty"`
			} `json:"relabelings,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type ruleGroups struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert         string            `json:"alert,omitempty"`
			Record        string            `json:"record,omitempty"`
			Expr          string            `json:"expr"`
			For           string            `json:"for,omitempty"`
			KeepFiringFor string            `json:"keep_firing_for,omitempty"`
			Labels        map[string]string `json:"labels,omitempty"`
			Annotations   map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ruleGroups `json:"spec"`
}

// release is what the chart renders for one set of values, decoded.
type release struct {
	*manifests
	serviceAccounts map[string]*corev1.ServiceAccount
	pvcs            map[string]*corev1.PersistentVolumeClaim
	serviceMonitors map[string]*serviceMonitor
	rules           map[string]*prometheusRule
	notes           string
}

// chartValues reads the values files as helm install -f does, the later
// overriding the earlier key by key, then applies overrides (as --set).
func chartValues(t *testing.T, files []string, overrides map[string]any) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(filepath.Join(chartDir, f))
		if err != nil {
			t.Fatal(err)
		}
		vals = mergeValues(vals, v.AsMap())
	}
	return mergeValues(vals, overrides)
}

// mergeValues merges b into a as Helm merges values files: maps key by
// key, anything else replaced.
func mergeValues(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// renderChart renders the chart as helm template --namespace streamgate
// streamgate does, and returns the templates' output by file name.
func renderChart(vals map[string]any) (map[string]string, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *chartKubeVersion
	top, err := chartutil.ToRenderValues(ch, vals, chartutil.ReleaseOptions{
		Name: releaseName, Namespace: releaseNS, Revision: 1, IsInstall: true,
	}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, top)
}

// mustRender renders and decodes every object strictly into its type.
func mustRender(t *testing.T, vals map[string]any) *release {
	t.Helper()
	out, err := renderChart(vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	r := &release{
		manifests: &manifests{
			deployments: map[string]*appsv1.Deployment{},
			services:    map[string]*corev1.Service{},
			configMaps:  map[string]*corev1.ConfigMap{},
			secrets:     map[string]*corev1.Secret{},
			pdbs:        map[string]*policyv1.PodDisruptionBudget{},
			hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
			netpols:     map[string]*networkingv1.NetworkPolicy{},
		},
		serviceAccounts: map[string]*corev1.ServiceAccount{},
		pvcs:            map[string]*corev1.PersistentVolumeClaim{},
		serviceMonitors: map[string]*serviceMonitor{},
		rules:           map[string]*prometheusRule{},
	}
	for _, name := range slices.Sorted(maps.Keys(out)) {
		text := out[name]
		switch {
		case strings.HasSuffix(name, "NOTES.txt"):
			r.notes = text
			continue
		case !strings.HasSuffix(name, ".yaml"):
			continue
		}
		docs, err := splitDocuments([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, text)
		}
		for i, doc := range docs {
			where := fmt.Sprintf("%s, document %d", name, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v\n%s", where, err, doc)
			}
			obj, store, err := r.newObject(tm)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if err := decodeStrict(doc, obj); err != nil {
				t.Errorf("%s: not a valid %s %s: %v\n%s", where, tm.APIVersion, tm.Kind, err, doc)
				continue
			}
			if obj.GetName() == "" {
				t.Errorf("%s: metadata.name is empty", where)
			}
			if err := store(); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return r
}

func splitDocuments(data []byte) ([][]byte, error) {
	rd := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := rd.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if s := strings.TrimSpace(string(j)); s != "null" && s != "" {
			docs = append(docs, doc)
		}
	}
}

func (r *release) newObject(tm metav1.TypeMeta) (metav1.Object, func() error, error) {
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 ServiceAccount":
		o := &corev1.ServiceAccount{}
		return o, func() error { return put(r.serviceAccounts, o.Name, o) }, nil
	case "v1 PersistentVolumeClaim":
		o := &corev1.PersistentVolumeClaim{}
		return o, func() error { return put(r.pvcs, o.Name, o) }, nil
	case "monitoring.coreos.com/v1 ServiceMonitor":
		o := &serviceMonitor{}
		return o, func() error { return put(r.serviceMonitors, o.Name, o) }, nil
	case "monitoring.coreos.com/v1 PrometheusRule":
		o := &prometheusRule{}
		return o, func() error { return put(r.rules, o.Name, o) }, nil
	case "v1 Secret":
		return nil, nil, errors.New("the chart renders a Secret: secrets are referenced by name, never rendered from values")
	}
	return r.manifests.newObject(tm)
}

// gateway returns the release's Deployment and its gateway container.
func (r *release) gateway(t *testing.T) (*appsv1.Deployment, *corev1.Container) {
	t.Helper()
	d, ok := r.deployments[releaseName]
	if !ok {
		t.Fatalf("the chart renders no Deployment named %s", releaseName)
	}
	return d, container(t, d, gatewayCtr)
}

// testEnv gives every variable of secretEnv a value of its own. Each
// starts with "*", which YAML reads as an alias unless the reference was
// quoted, as a generated secret may.
func testEnv(ctr *corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range ctr.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = "*test-" + strings.ToLower(strings.ReplaceAll(e.Name, "_", "-")) + "-0123456789abcdef"
		}
	}
	return env
}

// secretDirs are the directories the container mounts whole from Secret
// volumes, with the keys each holds (nil: every key of the Secret).
func secretDirs(d *appsv1.Deployment, ctr *corev1.Container) map[string][]string {
	dirs := map[string][]string{}
	for _, vm := range ctr.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil || vm.SubPath != "" {
				continue
			}
			var keys []string
			for _, it := range v.Secret.Items {
				keys = append(keys, it.Path)
			}
			dirs[filepath.Clean(vm.MountPath)] = keys
		}
	}
	return dirs
}

// renderedConfig returns the configuration text of the release's ConfigMap
// after checking that the container mounts it where it reads it.
func (r *release) renderedConfig(t *testing.T) string {
	t.Helper()
	d, ctr := r.gateway(t)
	cm := must(t, "ConfigMap", r.configMaps, releaseName)
	text, ok := cm.Data[configKey]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, configKey)
	}
	cfgPath := configPathFromArgs(t, ctr.Args)
	mounted := false
	for _, vm := range ctr.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && vm.ReadOnly &&
				filepath.Join(vm.MountPath, configKey) == cfgPath && vm.SubPath == "" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("the container reads %s, which is not ConfigMap %s's %s mounted read-only", cfgPath, cm.Name, configKey)
	}
	return text
}

// checkConfig loads the release's configuration as streamgate check does
// on a pod: every ${VAR} from the container's Secret environment (and
// nothing else), every file the configuration names from a directory the
// container mounts from a Secret, stood in for by test files (a test
// certificate for the listeners). It returns the configuration.
func (r *release) checkConfig(t *testing.T) *config.Config {
	t.Helper()
	d, ctr := r.gateway(t)
	text := r.renderedConfig(t)
	env := testEnv(ctr)
	for _, name := range configVars(text) {
		if _, ok := env[name]; !ok {
			t.Errorf("${%s} of the configuration is not in the container's environment from a Secret (secretEnv)", name)
		}
	}
	for name, v := range env {
		if strings.Contains(text, v) {
			t.Errorf("the ConfigMap holds the value of %s", name)
		}
	}

	// Every absolute path of the configuration under a Secret's directory
	// is made in a directory of the test's own.
	tmp := t.TempDir()
	ca := testpki.NewCA(t, "helm test CA")
	leaf := ca.Issue(t, testpki.Options{})
	files := map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM, "ca.crt": ca.CertPEM}
	dirs := secretDirs(d, ctr)
	local := text
	for dir, keys := range dirs {
		if !strings.Contains(text, dir+"/") {
			continue
		}
		ldir := filepath.Join(tmp, strings.ReplaceAll(strings.Trim(dir, "/"), "/", "_"))
		if err := os.MkdirAll(ldir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(text, "\n") {
			_, after, ok := strings.Cut(line, dir+"/")
			if !ok {
				continue
			}
			file := strings.Fields(strings.Trim(after, `"' `))[0]
			file = strings.Trim(file, `"'`)
			if keys != nil && !slices.Contains(keys, file) {
				t.Errorf("%s/%s: the Secret volume mounted at %s holds only %v", dir, file, dir, keys)
			}
			data, ok := files[file]
			if !ok {
				data = []byte("test-secret-file-0123456789abcdef\n")
			}
			if err := os.WriteFile(filepath.Join(ldir, file), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		local = strings.ReplaceAll(local, dir+"/", ldir+"/")
	}
	cfg, err := config.Parse([]byte(local), func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		t.Fatalf("the rendered %s does not pass streamgate check:\n%v\n%s", configKey, err, text)
	}
	for _, name := range cfg.NetworkNames() {
		if cfg.Networks[name].Upstream.Embedded() {
			t.Errorf("networks.%s.upstream.url is embedded, which the image (-tags nosimulator) refuses", name)
		}
	}
	// Files the configuration names outside the Secrets' directories would
	// be missing on the pod: Parse found them above only if in tmp.
	for _, p := range absolutePaths(local) {
		if !strings.HasPrefix(p, tmp) {
			t.Errorf("the configuration names %s, which no Secret volume of the pod holds", p)
		}
	}
	return cfg
}

// absolutePaths lists the values of *_file keys of a configuration text.
func absolutePaths(text string) []string {
	var out []string
	var doc map[string]any
	if yaml.Unmarshal([]byte(text), &doc) != nil {
		return nil
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && strings.HasSuffix(k, "_file") && s != "" {
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// checkRelease checks what holds for every set of values: the pods'
// selectors, probes, shutdown and hardening, the Services and the rest
// agreeing with the gateway's pods and ports.
func checkRelease(t *testing.T, r *release, cfg *config.Config) {
	t.Helper()
	gw, ctr := r.gateway(t)
	pods := labels.Set(gw.Spec.Template.Labels)
	if !labelSelector(t, gw.Spec.Selector).Matches(pods) {
		t.Errorf("the Deployment's selector does not match its pods' labels %v", pods)
	}
	checkHTTPProbe(t, "readinessProbe", ctr, ctr.ReadinessProbe, "/readyz")
	checkHTTPProbe(t, "livenessProbe", ctr, ctr.LivenessProbe, "/healthz")
	checkHTTPProbe(t, "startupProbe", ctr, ctr.StartupProbe, "/healthz")
	if p, ok := namedPort(ctr, "admin"); !ok || int(p) != listenPort(t, cfg.Server.AdminListen) {
		t.Errorf("container port admin %d is not server.admin_listen %q", p, cfg.Server.AdminListen)
	}
	for _, name := range cfg.NetworkNames() {
		if p, ok := namedPort(ctr, name); !ok || int(p) != listenPort(t, cfg.Networks[name].Listen) {
			t.Errorf("networks.%s.listen %q has no container port named %s", name, cfg.Networks[name].Listen, name)
		}
	}
	if len(ctr.Command) > 0 {
		t.Errorf("command %v overrides the image's ENTRYPOINT", ctr.Command)
	}

	// SIGTERM comes after the preStop sleep; then the drain and the
	// requests in flight take up to shutdown_timeout, before SIGKILL.
	var preStop time.Duration
	if ps := ctr.Lifecycle; ps != nil && ps.PreStop != nil {
		if ps.PreStop.Sleep == nil {
			t.Error("preStop must be the kubelet's sleep: the image has no shell")
		} else {
			preStop = time.Duration(ps.PreStop.Sleep.Seconds) * time.Second
		}
	}
	grace := time.Duration(deref(gw.Spec.Template.Spec.TerminationGracePeriodSeconds)) * time.Second
	if need := preStop + cfg.Server.ShutdownTimeout; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v must exceed the preStop sleep plus server.shutdown_timeout (%v)", grace, need)
	}
	if cfg.Realtime.DrainDelay*2 > cfg.Server.ShutdownTimeout {
		t.Errorf("realtime.drain_delay %v is more than half of server.shutdown_timeout %v", cfg.Realtime.DrainDelay, cfg.Server.ShutdownTimeout)
	}

	// The hardening of the image's user and the plain manifests.
	sc, psc := ctr.SecurityContext, gw.Spec.Template.Spec.SecurityContext
	if sc == nil || psc == nil || !isTrue(sc.ReadOnlyRootFilesystem) || !isTrue(sc.RunAsNonRoot) ||
		deref(sc.RunAsUser) != 65532 || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("the container's securityContext is not the hardened one: %+v", sc)
	}
	if deref(gw.Spec.Template.Spec.AutomountServiceAccountToken) {
		t.Error("automountServiceAccountToken must be false")
	}
	if sa := gw.Spec.Template.Spec.ServiceAccountName; sa != "" && sa != "default" {
		if _, ok := r.serviceAccounts[sa]; !ok {
			t.Errorf("the pods run as ServiceAccount %s, which the chart does not render", sa)
		}
	}

	// Every Service selects the gateway's pods and targets its ports.
	for _, svc := range r.services {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(pods) {
			t.Errorf("Service %s does not select the gateway's pods", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := resolvePort(ctr, p.TargetPort); !ok {
				t.Errorf("Service %s port %s targets %s, not a port of the container", svc.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	for _, pdb := range r.pdbs {
		if !labelSelector(t, pdb.Spec.Selector).Matches(pods) {
			t.Errorf("PodDisruptionBudget %s does not select the gateway's pods", pdb.Name)
		}
	}
	for _, hpa := range r.hpas {
		if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != gw.Name || ref.APIVersion != "apps/v1" {
			t.Errorf("HorizontalPodAutoscaler %s scales %+v, not the Deployment", hpa.Name, ref)
		}
		if gw.Spec.Replicas != nil {
			t.Error("with the autoscaler the Deployment must leave replicas unset, or each upgrade resets the count")
		}
	}
	for _, np := range r.netpols {
		if !labelSelector(t, &np.Spec.PodSelector).Matches(pods) {
			t.Errorf("NetworkPolicy %s does not select the gateway's pods", np.Name)
		}
		open := map[int32]bool{}
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				open[int32(p.Port.IntValue())] = true
			}
		}
		for _, p := range ctr.Ports {
			if !open[p.ContainerPort] {
				t.Errorf("NetworkPolicy %s admits nothing to port %s (%d)", np.Name, p.Name, p.ContainerPort)
			}
		}
	}
	for _, sm := range r.serviceMonitors {
		sel := labelSelector(t, &sm.Spec.Selector)
		found := false
		for _, svc := range r.services {
			if sel.Matches(labels.Set(svc.Labels)) {
				found = true
				for _, ep := range sm.Spec.Endpoints {
					if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
						t.Errorf("ServiceMonitor %s scrapes port %q, which Service %s lacks", sm.Name, ep.Port, svc.Name)
					}
				}
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s selects no Service of the chart", sm.Name)
		}
		for _, ep := range sm.Spec.Endpoints {
			job := ""
			for _, rl := range ep.Relabelings {
				if rl.TargetLabel == "job" && rl.Replacement != nil {
					job = *rl.Replacement
				}
			}
			if job != "streamgate" {
				t.Errorf("ServiceMonitor %s: the alert rules select job=\"streamgate\"; the targets' job is %q", sm.Name, job)
			}
		}
	}
}

// TestHelmChart renders the chart for its default values and for the
// production values file, checks every object and the configuration, and
// lints the chart as helm lint does.
func TestHelmChart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
	}{
		{"default values", nil},
		{"production values", []string{productionVals}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := chartValues(t, tc.files, nil)
			lintChart(t, vals)
			r := mustRender(t, vals)
			cfg := r.checkConfig(t)
			checkRelease(t, r, cfg)
			if strings.Contains(r.renderedConfig(t), "archive") {
				t.Error("the configuration has an archive block: the archive must be off unless enabled")
			}
			if r.notes == "" {
				t.Error("NOTES.txt renders nothing")
			}
		})
	}
}

// lintChart runs helm lint's rules (Chart.yaml, values, templates) and
// fails on any message at warning level or above: the chart is lint
// clean, as helm lint --strict would have it.
func lintChart(t *testing.T, vals map[string]any) {
	t.Helper()
	l := lint.AllWithKubeVersion(chartDir, vals, releaseNS, chartKubeVersion)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		} else {
			t.Logf("helm lint: %s", m)
		}
	}
}

// TestHelmProduction checks what the production values promise: a fleet
// sharing Redis Sentinel, TLS from a Secret cert-manager can own, an
// autoscaler, a PDB, a NetworkPolicy and the monitoring objects.
func TestHelmProduction(t *testing.T) {
	r := mustRender(t, chartValues(t, []string{productionVals}, nil))
	cfg := r.checkConfig(t)
	gw, ctr := r.gateway(t)

	hpa := must(t, "HorizontalPodAutoscaler", r.hpas, releaseName)
	if deref(hpa.Spec.MinReplicas) != wantReplicas {
		t.Errorf("the autoscaler's minimum is %d, want %d", deref(hpa.Spec.MinReplicas), wantReplicas)
	}
	if rl := cfg.RateLimit; rl.Backend != "redis" || rl.Redis.Sentinel == nil || len(rl.Redis.Sentinel.Addrs) == 0 {
		t.Errorf("ratelimit: backend %q through Sentinel %+v, want redis through Sentinel", rl.Backend, rl.Redis.Sentinel)
	}
	if sh := cfg.Cache.Shared; sh.Backend != config.SharedRedis || sh.Sentinel == nil || len(sh.Sentinel.Addrs) == 0 {
		t.Errorf("cache.shared: backend %q through Sentinel %+v, want redis through Sentinel", sh.Backend, sh.Sentinel)
	}
	for _, name := range cfg.NetworkNames() {
		tb := cfg.Networks[name].TLS
		if tb == nil {
			t.Errorf("networks.%s has no tls", name)
			continue
		}
		for _, f := range []string{tb.CertFile, tb.KeyFile} {
			if !strings.HasPrefix(f, os.TempDir()) {
				t.Errorf("networks.%s.tls: %s is not from the TLS Secret's volume", name, f)
			}
		}
	}
	tlsVolume := false
	for _, v := range gw.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "streamgate-tls" {
			tlsVolume = true
		}
	}
	if !tlsVolume {
		t.Error("no volume of the Secret streamgate-tls, a cert-manager Certificate's secretName")
	}
	if _, ok := secretDirs(gw, ctr)["/etc/streamgate-tls"]; !ok {
		t.Error("the TLS Secret is not mounted whole at /etc/streamgate-tls")
	}
	if len(r.pdbs) != 1 || len(r.netpols) != 1 || len(r.serviceMonitors) != 1 || len(r.rules) != 1 {
		t.Errorf("want one each of PDB, NetworkPolicy, ServiceMonitor, PrometheusRule; got %d, %d, %d, %d",
			len(r.pdbs), len(r.netpols), len(r.serviceMonitors), len(r.rules))
	}
	if _, ok := r.configMaps[releaseName+"-dashboard"]; !ok {
		t.Error("no dashboard ConfigMap")
	}
}

// TestHelmMonitoringCopies: the chart ships deploy/'s alert rules and
// dashboard, byte for byte, and renders them unchanged.
func TestHelmMonitoringCopies(t *testing.T) {
	for src, cp := range map[string]string{
		"prometheus/alerts.yaml":  chartDir + "/files/alerts.yaml",
		"grafana/streamgate.json": chartDir + "/files/streamgate.json",
	} {
		a, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(cp)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs from %s: copy it (cp deploy/%s deploy/%s)", cp, src, src, cp)
		}
	}

	r := mustRender(t, chartValues(t, []string{productionVals}, nil))
	data, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var want ruleGroups
	if err := decodeStrict(data, &want); err != nil {
		t.Fatalf("prometheus/alerts.yaml: %v", err)
	}
	pr := must(t, "PrometheusRule", r.rules, releaseName)
	if !reflect.DeepEqual(pr.Spec, want) {
		t.Error("the PrometheusRule's spec is not the rules of prometheus/alerts.yaml")
	}
	if n := len(want.Groups); n == 0 {
		t.Error("prometheus/alerts.yaml has no groups")
	}

	dash := must(t, "ConfigMap", r.configMaps, releaseName+"-dashboard")
	if dash.Labels["grafana_dashboard"] != "1" {
		t.Errorf("the dashboard ConfigMap lacks the sidecar's label grafana_dashboard: %v", dash.Labels)
	}
	wantJSON, err := os.ReadFile("grafana/streamgate.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := dash.Data["streamgate.json"]; got != strings.TrimRight(string(wantJSON), "\n") {
		t.Error("the dashboard ConfigMap's streamgate.json is not grafana/streamgate.json")
	}
}

// TestHelmMatchesKubernetes holds the chart's production fleet and the
// plain manifests of kubernetes/ to the same gateway: containers, probes,
// ports, security contexts, resources, shutdown, rollout, spread, PDB,
// autoscaler, Services and the configuration but for its Redis addresses
// (Sentinel in the chart's values, the manifests' own Redis Services
// there) and its certificate paths. The manifests stay written by hand,
// with their comments, for kubectl apply -k; this test keeps the two from
// drifting apart.
func TestHelmMatchesKubernetes(t *testing.T) {
	plain := loadManifests(t)
	pgw := plain.deployment(t, gatewayName)
	pctr := container(t, pgw, gatewayCtr)
	r := mustRender(t, chartValues(t, []string{productionVals}, nil))
	gw, ctr := r.gateway(t)

	same := func(what string, chart, manifests any) {
		t.Helper()
		if !reflect.DeepEqual(chart, manifests) {
			cj, _ := yaml.Marshal(chart)
			mj, _ := yaml.Marshal(manifests)
			t.Errorf("%s differ:\nchart:\n%s\nkubernetes/:\n%s", what, cj, mj)
		}
	}

	// The container.
	same("container ports", ctr.Ports, pctr.Ports)
	same("args", ctr.Args, pctr.Args)
	same("imagePullPolicy", ctr.ImagePullPolicy, pctr.ImagePullPolicy)
	same("startupProbe", ctr.StartupProbe, pctr.StartupProbe)
	same("readinessProbe", ctr.ReadinessProbe, pctr.ReadinessProbe)
	same("livenessProbe", ctr.LivenessProbe, pctr.LivenessProbe)
	same("lifecycle", ctr.Lifecycle, pctr.Lifecycle)
	same("container securityContext", ctr.SecurityContext, pctr.SecurityContext)
	same("resources", ctr.Resources, pctr.Resources)
	envOf := func(c *corev1.Container) (plainEnv map[string]string, fromSecret []string) {
		plainEnv = map[string]string{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				fromSecret = append(fromSecret, e.Name)
			} else {
				plainEnv[e.Name] = e.Value
			}
		}
		slices.Sort(fromSecret)
		return plainEnv, fromSecret
	}
	ce, cs := envOf(ctr)
	pe, ps := envOf(pctr)
	same("plain environment", ce, pe)
	same("environment from Secrets", cs, ps)
	mounts := func(d *appsv1.Deployment, c *corev1.Container) map[string]string {
		out := map[string]string{}
		for _, vm := range c.VolumeMounts {
			for _, v := range d.Spec.Template.Spec.Volumes {
				switch {
				case v.Name != vm.Name:
				case v.ConfigMap != nil:
					out[vm.MountPath] = "configmap " + v.ConfigMap.Name
				case v.Secret != nil:
					out[vm.MountPath] = "secret " + v.Secret.SecretName
				}
			}
		}
		return out
	}
	cm, pm := mounts(gw, ctr), mounts(pgw, pctr)
	delete(cm, "/etc/streamgate-secrets/sentinel") // the Sentinel's password: the manifests' Redis has none
	same("volume mounts", cm, pm)

	// The pod and the rollout.
	cp, pp := gw.Spec.Template.Spec, pgw.Spec.Template.Spec
	same("pod securityContext", cp.SecurityContext, pp.SecurityContext)
	same("terminationGracePeriodSeconds", cp.TerminationGracePeriodSeconds, pp.TerminationGracePeriodSeconds)
	same("automountServiceAccountToken", cp.AutomountServiceAccountToken, pp.AutomountServiceAccountToken)
	same("enableServiceLinks", cp.EnableServiceLinks, pp.EnableServiceLinks)
	spread := func(cs []corev1.TopologySpreadConstraint, pods map[string]string) []corev1.TopologySpreadConstraint {
		out := slices.Clone(cs)
		for i := range out {
			if !labelSelector(t, out[i].LabelSelector).Matches(labels.Set(pods)) {
				t.Errorf("topologySpreadConstraints[%d] does not select its Deployment's pods", i)
			}
			out[i].LabelSelector = nil
		}
		return out
	}
	same("topologySpreadConstraints", spread(cp.TopologySpreadConstraints, gw.Spec.Template.Labels), spread(pp.TopologySpreadConstraints, pgw.Spec.Template.Labels))
	same("strategy", gw.Spec.Strategy, pgw.Spec.Strategy)
	same("minReadySeconds", gw.Spec.MinReadySeconds, pgw.Spec.MinReadySeconds)
	same("revisionHistoryLimit", gw.Spec.RevisionHistoryLimit, pgw.Spec.RevisionHistoryLimit)
	prom := func(ann map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range ann {
			if strings.HasPrefix(k, "prometheus.io/") {
				out[k] = v
			}
		}
		return out
	}
	same("prometheus.io annotations", prom(gw.Spec.Template.Annotations), prom(pgw.Spec.Template.Annotations))

	// The replicas: the manifests' Deployment starts at the autoscaler's
	// minimum, the chart's leaves the count to it.
	hpa, phpa := must(t, "HorizontalPodAutoscaler", r.hpas, releaseName), plain.hpa(t, gatewayName)
	same("autoscaler minReplicas", hpa.Spec.MinReplicas, pgw.Spec.Replicas)
	same("autoscaler minReplicas", hpa.Spec.MinReplicas, phpa.Spec.MinReplicas)
	same("autoscaler maxReplicas", hpa.Spec.MaxReplicas, phpa.Spec.MaxReplicas)
	same("autoscaler metrics", hpa.Spec.Metrics, phpa.Spec.Metrics)
	same("autoscaler behavior", hpa.Spec.Behavior, phpa.Spec.Behavior)

	pdb, ppdb := must(t, "PodDisruptionBudget", r.pdbs, releaseName), plain.pdb(t, gatewayName)
	same("PDB minAvailable", pdb.Spec.MinAvailable, ppdb.Spec.MinAvailable)
	same("PDB maxUnavailable", pdb.Spec.MaxUnavailable, ppdb.Spec.MaxUnavailable)
	same("PDB unhealthyPodEvictionPolicy", pdb.Spec.UnhealthyPodEvictionPolicy, ppdb.Spec.UnhealthyPodEvictionPolicy)

	// The Services: the chart's client and admin Services together have
	// the manifests' one Service's ports.
	svcPorts := func(svcs ...*corev1.Service) map[string]string {
		out := map[string]string{}
		for _, s := range svcs {
			for _, p := range s.Spec.Ports {
				out[p.Name] = fmt.Sprintf("%d->%s/%s", p.Port, p.TargetPort.String(), p.Protocol)
			}
		}
		return out
	}
	same("Service ports", svcPorts(slices.Collect(maps.Values(r.services))...), svcPorts(plain.service(t, gatewayName)))

	// The configuration, with the same variables: all but the Redis
	// addresses and the certificate paths.
	ccfg := r.checkConfig(t)
	text := plain.configMap(t, gatewayName).Data[configKey]
	tlsDir := t.TempDir()
	leaf := testpki.NewCA(t, "helm test CA").Issue(t, testpki.Options{})
	for name, data := range map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(tlsDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := testEnv(ctr)
	pcfg, err := config.Parse([]byte(strings.ReplaceAll(text, "/etc/streamgate-tls/", tlsDir+"/")), func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		t.Fatalf("kubernetes/configmap.yaml: %v", err)
	}
	same("server", ccfg.Server, pcfg.Server)
	same("log", ccfg.Log, pcfg.Log)
	same("auth", ccfg.Auth, pcfg.Auth)
	same("realtime", ccfg.Realtime, pcfg.Realtime)
	same("tracing", ccfg.Tracing, pcfg.Tracing)
	same("teams", ccfg.Teams, pcfg.Teams)
	same("network names", ccfg.NetworkNames(), pcfg.NetworkNames())
	for _, name := range pcfg.NetworkNames() {
		c, p := ccfg.Network(name), pcfg.Network(name)
		if c == nil {
			continue
		}
		same("networks."+name+".listen", c.Listen, p.Listen)
		same("networks."+name+".upstream", c.Upstream, p.Upstream)
		same("networks."+name+".verify", c.Verify, p.Verify)
		same("networks."+name+".tls is set", c.TLS != nil, p.TLS != nil)
	}
	cc, pc := ccfg.Cache, pcfg.Cache
	cc.Shared, pc.Shared = config.SharedCache{}, config.SharedCache{}
	same("cache", cc, pc)
	same("cache.shared.backend", ccfg.Cache.Shared.Backend, pcfg.Cache.Shared.Backend)
	same("ratelimit.backend", ccfg.RateLimit.Backend, pcfg.RateLimit.Backend)
	same("ratelimit.redis.fail_mode", ccfg.RateLimit.Redis.FailMode, pcfg.RateLimit.Redis.FailMode)
}

// TestHelmRedisForms renders the chart with the limits and the shared
// cache in each of Redis's three forms, the passwords from a Secret's
// environment or a mounted Secret's file, and loads the configuration.
func TestHelmRedisForms(t *testing.T) {
	secretEnv := map[string]any{"REDIS_PASSWORD": map[string]any{"secretName": "redis-auth", "key": "password"}}
	sentinelMount := []any{map[string]any{"name": "redis", "secretName": "redis-auth", "mountPath": "/etc/streamgate-secrets/redis"}}
	for _, tc := range []struct {
		name   string
		redis  map[string]any
		mounts []any
		check  func(*config.Config) bool
	}{
		{"url", map[string]any{"url": "redis://redis-master:6379/0", "password": "${REDIS_PASSWORD}"}, nil,
			func(c *config.Config) bool { return c.RateLimit.Redis.URL != "" }},
		{"sentinel", map[string]any{
			"sentinel": map[string]any{"master": "mymaster", "addrs": []any{"redis-sentinel:26379"},
				"sentinel_password_file": "/etc/streamgate-secrets/redis/sentinel-password"},
			"password_file": "/etc/streamgate-secrets/redis/password"}, sentinelMount,
			func(c *config.Config) bool { return c.RateLimit.Redis.Sentinel != nil }},
		{"cluster", map[string]any{"cluster": map[string]any{"addrs": []any{"redis-cluster-0.redis-cluster:6379", "redis-cluster-1.redis-cluster:6379"}},
			"password": "${REDIS_PASSWORD}"}, nil,
			func(c *config.Config) bool { return c.RateLimit.Redis.Cluster != nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shared := maps.Clone(tc.redis)
			shared["backend"] = "redis"
			vals := chartValues(t, nil, map[string]any{
				"replicaCount": 3,
				"config": map[string]any{
					"ratelimit": map[string]any{"backend": "redis", "redis": tc.redis},
					"cache":     map[string]any{"shared": shared},
				},
				"secretEnv":    secretEnv,
				"secretMounts": tc.mounts,
			})
			r := mustRender(t, vals)
			cfg := r.checkConfig(t)
			checkRelease(t, r, cfg)
			if !tc.check(cfg) || cfg.Cache.Shared.Backend != config.SharedRedis {
				t.Errorf("the configuration does not use Redis as %s: %+v", tc.name, cfg.RateLimit.Redis)
			}
			lintChart(t, vals)
		})
	}
}

// TestHelmArchive renders the archive, off by default, in its two backends,
// each configuration passing streamgate check.
func TestHelmArchive(t *testing.T) {
	archiveOf := func(t *testing.T, r *release) map[string]any {
		t.Helper()
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(r.renderedConfig(t)), &doc); err != nil {
			t.Fatal(err)
		}
		a, _ := doc["archive"].(map[string]any)
		return a
	}
	t.Run("pebble", func(t *testing.T) {
		r := mustRender(t, chartValues(t, nil, map[string]any{"archive": map[string]any{"enabled": true, "backend": "pebble"}}))
		a := archiveOf(t, r)
		if a["backend"] != "pebble" || a["path"] != "/var/lib/streamgate/archive" {
			t.Errorf("archive block %v", a)
		}
		if cfg := r.checkConfig(t); cfg.Archive.Backend != config.ArchiveBackendPebble {
			t.Errorf("the checked configuration's archive backend %q", cfg.Archive.Backend)
		}
		gw, ctr := r.gateway(t)
		pvc := must(t, "PersistentVolumeClaim", r.pvcs, releaseName+"-archive")
		mounted := false
		for _, vm := range ctr.VolumeMounts {
			for _, v := range gw.Spec.Template.Spec.Volumes {
				if v.Name == vm.Name && v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == pvc.Name &&
					vm.MountPath == a["path"] && !vm.ReadOnly {
					mounted = true
				}
			}
		}
		if !mounted {
			t.Errorf("the claim %s is not mounted writable at the archive's path", pvc.Name)
		}
		if gw.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			t.Errorf("strategy %s: a pebble store on a ReadWriteOnce volume needs Recreate", gw.Spec.Strategy.Type)
		}
		if _, err := renderChart(chartValues(t, nil, map[string]any{"replicaCount": 3, "archive": map[string]any{"enabled": true}})); err == nil ||
			!strings.Contains(err.Error(), "pebble") {
			t.Errorf("pebble with 3 replicas rendered: %v", err)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		r := mustRender(t, chartValues(t, []string{productionVals}, map[string]any{"archive": map[string]any{
			"enabled": true, "backend": "postgres",
			"postgres": map[string]any{"url": "postgres://streamgate@postgres:5432/streamgate?sslmode=verify-full",
				"passwordSecret": map[string]any{"name": "streamgate-postgres", "key": "password"}},
		}}))
		a := archiveOf(t, r)
		pg, _ := a["postgres"].(map[string]any)
		file, _ := pg["password_file"].(string)
		if a["backend"] != "postgres" || pg["url"] == "" || file == "" {
			t.Fatalf("archive block %v", a)
		}
		cfg := r.checkConfig(t)
		if cfg.Archive.Backend != config.ArchiveBackendPostgres || cfg.Archive.Postgres.Password.Reveal() == "" {
			t.Errorf("the checked configuration's archive: backend %q, a password read from its file: %v",
				cfg.Archive.Backend, cfg.Archive.Postgres.Password.Reveal() != "")
		}
		gw, ctr := r.gateway(t)
		keys, ok := secretDirs(gw, ctr)[filepath.Dir(file)]
		if !ok || !slices.Contains(keys, filepath.Base(file)) {
			t.Errorf("password_file %s is not a key of a Secret volume mounted there", file)
		}
		if _, ok := a["password"]; ok {
			t.Error("the archive's password is in the ConfigMap")
		}
		if gw.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
			t.Errorf("strategy %s: a postgres archive is shared, the fleet rolls", gw.Spec.Strategy.Type)
		}
	})
}

// TestHelmOptions renders the values that the two files leave off: client
// certificates verified against a CA from a Secret, the NetworkPolicy's
// egress, an image by digest, extra volumes, and a ConfigMap of the
// user's own.
func TestHelmOptions(t *testing.T) {
	t.Run("client CA", func(t *testing.T) {
		vals := chartValues(t, []string{productionVals}, map[string]any{"tls": map[string]any{
			"clientCA": map[string]any{"enabled": true, "secretName": "streamgate-client-ca", "clientAuth": "require"},
		}})
		lintChart(t, vals)
		r := mustRender(t, vals)
		cfg := r.checkConfig(t)
		checkRelease(t, r, cfg)
		for _, name := range cfg.NetworkNames() {
			tb := cfg.Networks[name].TLS
			if tb == nil || tb.ClientCAFile == "" || string(tb.ClientAuth) != "require" {
				t.Errorf("networks.%s.tls %+v: want client_ca_file and client_auth require", name, tb)
			}
		}
		gw, _ := r.gateway(t)
		found := false
		for _, v := range gw.Spec.Template.Spec.Volumes {
			found = found || v.Secret != nil && v.Secret.SecretName == "streamgate-client-ca"
		}
		if !found {
			t.Error("no volume of the client CA's Secret")
		}
	})
	t.Run("egress and digest", func(t *testing.T) {
		const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		vals := chartValues(t, []string{productionVals}, map[string]any{
			"image":             map[string]any{"digest": digest},
			"extraVolumes":      []any{map[string]any{"name": "dons", "configMap": map[string]any{"name": "streamgate-dons"}}},
			"extraVolumeMounts": []any{map[string]any{"name": "dons", "mountPath": "/etc/streamgate-dons", "readOnly": true}},
			"networkPolicy": map[string]any{"egress": map[string]any{"enabled": true, "to": []any{
				map[string]any{"to": []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "redis"}}}},
					"ports": []any{map[string]any{"protocol": "TCP", "port": 6379}, map[string]any{"protocol": "TCP", "port": 26379}}},
			}}},
		})
		lintChart(t, vals)
		r := mustRender(t, vals)
		checkRelease(t, r, r.checkConfig(t))
		np := must(t, "NetworkPolicy", r.netpols, releaseName)
		if !slices.Contains(np.Spec.PolicyTypes, "Egress") || len(np.Spec.Egress) != 3 {
			t.Errorf("egress %+v: want DNS, the upstream and Redis", np.Spec.Egress)
		}
		if _, ctr := r.gateway(t); !strings.HasSuffix(ctr.Image, "@"+digest) {
			t.Errorf("image %s, want the digest", ctr.Image)
		}
	})
	t.Run("existing ConfigMap", func(t *testing.T) {
		vals := chartValues(t, nil, map[string]any{"existingConfigMap": "my-config"})
		if _, err := renderChart(vals); err == nil || !strings.Contains(err.Error(), "ports must be given") {
			t.Errorf("an existing ConfigMap without ports rendered: %v", err)
		}
		vals = chartValues(t, nil, map[string]any{"existingConfigMap": "my-config",
			"ports": map[string]any{"mainnet": 8080, "admin": 9090}})
		lintChart(t, vals)
		r := mustRender(t, vals)
		if len(r.configMaps) != 0 {
			t.Errorf("the chart renders a ConfigMap beside the existing one: %v", slices.Collect(maps.Keys(r.configMaps)))
		}
		gw, ctr := r.gateway(t)
		found := false
		for _, v := range gw.Spec.Template.Spec.Volumes {
			found = found || v.ConfigMap != nil && v.ConfigMap.Name == "my-config"
		}
		if !found {
			t.Error("the existing ConfigMap is not mounted")
		}
		checkHTTPProbe(t, "readinessProbe", ctr, ctr.ReadinessProbe, "/readyz")
	})
}
