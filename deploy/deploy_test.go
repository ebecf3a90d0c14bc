package deploy

// The Kubernetes manifests are checked in two steps. First every document
// is decoded strictly into the k8s.io/api type of its apiVersion and kind,
// the way the API server decodes it: sigs.k8s.io/yaml turns YAML into JSON
// refusing duplicate keys, and sigs.k8s.io/json decodes that JSON
// case-sensitively, refusing unknown and duplicate fields. A misspelt or
// misplaced key, a wrong type or an unknown kind fails here. Then the
// objects are checked against each other and against the gateway's own
// configuration schema (package config).

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"streamgate/config"
	"streamgate/internal/testing/testpki"
)

const kubeDir = "kubernetes"

// The names the manifests agree on.
const (
	gatewayName   = "streamgate"             // Deployment, Service, ConfigMap, Secret, PDB, HPA
	gatewayCtr    = "streamgate"             // the gateway's container
	redisName     = "streamgate-redis"       // Redis Deployment and Service
	cacheRedis    = "streamgate-cache-redis" // the shared cache tier's Redis
	configKey     = "config.yaml"            // the ConfigMap's key
	adminPort     = 9090
	wantReplicas  = 3
	wantMinAvail  = 2
	wantMaxRepl   = 10
	wantCPUTarget = 70
)

// manifests are the objects of deploy/kubernetes by kind and name.
type manifests struct {
	deployments  map[string]*appsv1.Deployment
	services     map[string]*corev1.Service
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
	pdbs         map[string]*policyv1.PodDisruptionBudget
	hpas         map[string]*autoscalingv2.HorizontalPodAutoscaler
	netpols      map[string]*networkingv1.NetworkPolicy
	kustomizeImg []string // image names the kustomization sets
}

// decodeStrict decodes one YAML document into obj as the API server would,
// refusing duplicate keys, unknown fields and fields in the wrong case.
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// yamlDocuments splits a multi-document YAML file, dropping documents that
// hold only comments.
func yamlDocuments(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if s := strings.TrimSpace(string(j)); s != "null" && s != "" {
			docs = append(docs, doc)
		}
	}
}

// kustomization is the part of kustomization.yaml the test reads. It is
// decoded leniently: kustomize has many more fields, and kubectl checks them.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name string `json:"name"`
	} `json:"images"`
}

// loadManifests decodes every resource of the kustomization. It fails the
// test on any document that does not decode strictly into its type, on a
// kind the gateway does not use, and on a YAML file of the folder that the
// kustomization does not list (or the reverse).
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{
		deployments: map[string]*appsv1.Deployment{},
		services:    map[string]*corev1.Service{},
		configMaps:  map[string]*corev1.ConfigMap{},
		secrets:     map[string]*corev1.Secret{},
		pdbs:        map[string]*policyv1.PodDisruptionBudget{},
		hpas:        map[string]*autoscalingv2.HorizontalPodAutoscaler{},
		netpols:     map[string]*networkingv1.NetworkPolicy{},
	}

	data, err := os.ReadFile(filepath.Join(kubeDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(data, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: apiVersion/kind %s/%s, want kustomize.config.k8s.io/v1beta1/Kustomization", k.APIVersion, k.Kind)
	}
	for _, img := range k.Images {
		m.kustomizeImg = append(m.kustomizeImg, img.Name)
	}
	files, err := filepath.Glob(filepath.Join(kubeDir, "*.y*ml"))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, f := range files {
		if base := filepath.Base(f); base != "kustomization.yaml" {
			onDisk = append(onDisk, base)
		}
	}
	listed := slices.Sorted(slices.Values(k.Resources))
	if !slices.Equal(onDisk, listed) {
		t.Errorf("kustomization.yaml lists %v; the folder holds %v: every manifest must be listed, and only those", listed, onDisk)
	}

	for _, name := range k.Resources {
		path := filepath.Join(kubeDir, name)
		for i, doc := range yamlDocuments(t, path) {
			where := fmt.Sprintf("%s, document %d", path, i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			obj, store, err := m.newObject(tm)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			if err := decodeStrict(doc, obj); err != nil {
				t.Errorf("%s: not a valid %s %s: %v", where, tm.APIVersion, tm.Kind, err)
				continue
			}
			if obj.GetName() == "" {
				t.Errorf("%s: metadata.name is empty", where)
			}
			if ns := obj.GetNamespace(); ns != "" {
				t.Errorf("%s: metadata.namespace is %q: the manifests are namespace-agnostic (set it in an overlay)", where, ns)
			}
			if err := store(); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return m
}

// newObject makes the typed object for an apiVersion and kind, and a
// function that files it under its name once decoded.
func (m *manifests) newObject(tm metav1.TypeMeta) (metav1.Object, func() error, error) {
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		o := &appsv1.Deployment{}
		return o, func() error { return put(m.deployments, o.Name, o) }, nil
	case "v1 Service":
		o := &corev1.Service{}
		return o, func() error { return put(m.services, o.Name, o) }, nil
	case "v1 ConfigMap":
		o := &corev1.ConfigMap{}
		return o, func() error { return put(m.configMaps, o.Name, o) }, nil
	case "v1 Secret":
		o := &corev1.Secret{}
		return o, func() error { return put(m.secrets, o.Name, o) }, nil
	case "policy/v1 PodDisruptionBudget":
		o := &policyv1.PodDisruptionBudget{}
		return o, func() error { return put(m.pdbs, o.Name, o) }, nil
	case "autoscaling/v2 HorizontalPodAutoscaler":
		o := &autoscalingv2.HorizontalPodAutoscaler{}
		return o, func() error { return put(m.hpas, o.Name, o) }, nil
	case "networking.k8s.io/v1 NetworkPolicy":
		o := &networkingv1.NetworkPolicy{}
		return o, func() error { return put(m.netpols, o.Name, o) }, nil
	}
	return nil, nil, fmt.Errorf("unexpected apiVersion %q and kind %q: add the type to this test, or fix the manifest", tm.APIVersion, tm.Kind)
}

func put[T any](objs map[string]T, name string, o T) error {
	if _, dup := objs[name]; dup {
		return fmt.Errorf("a second object of this kind is named %q", name)
	}
	objs[name] = o
	return nil
}

func TestKubernetes(t *testing.T) {
	m := loadManifests(t)
	gw := m.deployment(t, gatewayName)
	ctr := container(t, gw, gatewayCtr)
	podLabels := gw.Spec.Template.Labels

	t.Run("gateway deployment", func(t *testing.T) {
		if gw.Spec.Replicas == nil || *gw.Spec.Replicas != wantReplicas {
			t.Errorf("replicas = %v, want %d", deref(gw.Spec.Replicas), wantReplicas)
		}
		sel := labelSelector(t, gw.Spec.Selector)
		if !sel.Matches(labels.Set(podLabels)) {
			t.Errorf("selector %v does not match the pod template's labels %v", sel, podLabels)
		}
		ru := gw.Spec.Strategy.RollingUpdate
		if gw.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "0" {
			t.Errorf("strategy must be RollingUpdate with maxUnavailable 0, got %+v", gw.Spec.Strategy)
		}
		checkHTTPProbe(t, "readinessProbe", ctr, ctr.ReadinessProbe, "/readyz")
		checkHTTPProbe(t, "livenessProbe", ctr, ctr.LivenessProbe, "/healthz")
		if ctr.StartupProbe == nil {
			t.Error("startupProbe is missing")
		} else if ctr.StartupProbe.HTTPGet != nil && ctr.StartupProbe.HTTPGet.Path == "/readyz" {
			t.Error("startupProbe must not use /readyz: an upstream outage at start would make the kubelet restart every pod")
		}
		if len(gw.Spec.Template.Spec.TopologySpreadConstraints) == 0 {
			t.Error("no topologySpreadConstraints: the replicas may all land on one node")
		}
		for i, c := range gw.Spec.Template.Spec.TopologySpreadConstraints {
			if !labelSelector(t, c.LabelSelector).Matches(labels.Set(podLabels)) {
				t.Errorf("topologySpreadConstraints[%d] does not select the gateway's pods", i)
			}
		}
		ann := gw.Spec.Template.Annotations
		if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != strconv.Itoa(adminPort) || ann["prometheus.io/path"] != "/metrics" {
			t.Errorf("prometheus.io annotations %v must scrape /metrics on %d", ann, adminPort)
		}
		if p, ok := namedPort(ctr, "admin"); !ok || p != adminPort {
			t.Errorf("container port \"admin\" = %d, want %d", p, adminPort)
		}
	})

	t.Run("hardened pods", func(t *testing.T) {
		for _, name := range slices.Sorted(maps.Keys(m.deployments)) {
			d := m.deployments[name]
			pod := &d.Spec.Template.Spec
			for _, c := range pod.Containers {
				where := name + "/" + c.Name
				sc := c.SecurityContext
				psc := pod.SecurityContext
				if sc == nil {
					t.Errorf("%s: no securityContext", where)
					continue
				}
				if !isTrue(sc.RunAsNonRoot) && (psc == nil || !isTrue(psc.RunAsNonRoot)) {
					t.Errorf("%s: runAsNonRoot must be true", where)
				}
				uid := sc.RunAsUser
				if uid == nil && psc != nil {
					uid = psc.RunAsUser
				}
				if uid == nil || *uid == 0 {
					t.Errorf("%s: runAsUser must be a non-zero numeric user", where)
				}
				if name == gatewayName && (uid == nil || *uid != 65532) {
					t.Errorf("%s: runAsUser = %v, want 65532 (the image's nonroot user)", where, deref(uid))
				}
				if !isTrue(sc.ReadOnlyRootFilesystem) {
					t.Errorf("%s: readOnlyRootFilesystem must be true", where)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s: allowPrivilegeEscalation must be false", where)
				}
				if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
					t.Errorf("%s: capabilities must drop ALL and add none", where)
				}
				if sc.SeccompProfile != nil && sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s: seccompProfile must be RuntimeDefault", where)
				}
				for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					req, hasReq := c.Resources.Requests[res]
					lim, hasLim := c.Resources.Limits[res]
					if !hasReq || !hasLim {
						t.Errorf("%s: resources must set both the request and the limit of %s", where, res)
					} else if req.Cmp(lim) > 0 {
						t.Errorf("%s: %s request %s exceeds its limit %s", where, res, req.String(), lim.String())
					}
				}
				if c.LivenessProbe == nil || c.ReadinessProbe == nil {
					t.Errorf("%s: liveness and readiness probes are required", where)
				}
			}
			if pod.SecurityContext == nil || pod.SecurityContext.SeccompProfile == nil ||
				pod.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("%s: the pod's seccompProfile must be RuntimeDefault", name)
			}
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("%s: automountServiceAccountToken must be false: nothing here calls the Kubernetes API", name)
			}
		}
	})

	t.Run("service", func(t *testing.T) {
		svc := m.service(t, gatewayName)
		if len(svc.Spec.Selector) == 0 || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
			t.Errorf("selector %v does not match the gateway's pod labels %v", svc.Spec.Selector, podLabels)
		}
		want := map[string]int32{"mainnet": 8080, "testnet": 8081, "metrics": adminPort}
		got := map[string]int32{}
		for _, p := range svc.Spec.Ports {
			got[p.Name] = p.Port
			if _, ok := resolvePort(ctr, p.TargetPort); !ok {
				t.Errorf("port %s: targetPort %s is not a port of the gateway container", p.Name, p.TargetPort.String())
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("ports %v, want %v", got, want)
		}
	})

	t.Run("pod disruption budget", func(t *testing.T) {
		pdb := m.pdb(t, gatewayName)
		if !labelSelector(t, pdb.Spec.Selector).Matches(labels.Set(podLabels)) {
			t.Errorf("selector does not match the gateway's pod labels %v", podLabels)
		}
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.String() != strconv.Itoa(wantMinAvail) {
			t.Errorf("minAvailable = %v, want %d", pdb.Spec.MinAvailable, wantMinAvail)
		}
		if pdb.Spec.MinAvailable != nil && pdb.Spec.MinAvailable.IntValue() >= int(deref(gw.Spec.Replicas)) {
			t.Error("minAvailable must be below the replicas, or no node could ever be drained")
		}
	})

	t.Run("autoscaler", func(t *testing.T) {
		hpa := m.hpa(t, gatewayName)
		ref := hpa.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || ref.Name != gw.Name {
			t.Errorf("scaleTargetRef %+v does not name the Deployment %s", ref, gw.Name)
		}
		if deref(hpa.Spec.MinReplicas) != wantReplicas || hpa.Spec.MaxReplicas != wantMaxRepl {
			t.Errorf("replicas %d to %d, want %d to %d", deref(hpa.Spec.MinReplicas), hpa.Spec.MaxReplicas, wantReplicas, wantMaxRepl)
		}
		if deref(hpa.Spec.MinReplicas) != deref(gw.Spec.Replicas) {
			t.Error("the Deployment's replicas must equal the autoscaler's minimum, or each apply fights the autoscaler")
		}
		cpu := false
		for _, mt := range hpa.Spec.Metrics {
			if mt.Type == autoscalingv2.ResourceMetricSourceType && mt.Resource != nil && mt.Resource.Name == corev1.ResourceCPU &&
				mt.Resource.Target.Type == autoscalingv2.UtilizationMetricType && deref(mt.Resource.Target.AverageUtilization) == wantCPUTarget {
				cpu = true
			}
		}
		if !cpu {
			t.Errorf("no CPU utilization target of %d%%", wantCPUTarget)
		}
		if _, ok := ctr.Resources.Requests[corev1.ResourceCPU]; !ok {
			t.Error("a CPU utilization target needs a CPU request on the container")
		}
	})

	for _, redisName := range []string{redisName, cacheRedis} {
		t.Run(redisName, func(t *testing.T) {
			rd := m.deployment(t, redisName)
			rc := rd.Spec.Template.Spec.Containers[0]
			if !strings.HasPrefix(rc.Image, "redis:7") {
				t.Errorf("redis image %q, want redis:7-alpine", rc.Image)
			}
			svc := m.service(t, redisName)
			redisPods := labels.Set(rd.Spec.Template.Labels)
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(redisPods) {
				t.Errorf("Service %s does not select the Redis pods", redisName)
			}
			if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
				t.Errorf("Service %s also selects the gateway's pods", redisName)
			}
			if labels.SelectorFromSet(m.service(t, gatewayName).Spec.Selector).Matches(redisPods) {
				t.Errorf("Service %s also selects the Redis pods", gatewayName)
			}
			for _, p := range svc.Spec.Ports {
				if n, ok := resolvePort(&rc, p.TargetPort); !ok || n != 6379 {
					t.Errorf("port %s targets %s, not Redis's 6379", p.Name, p.TargetPort.String())
				}
			}
			if !slices.Contains(rc.Args, "--requirepass") {
				t.Error("Redis must require a password (--requirepass)")
			}
		})

		t.Run(redisName+" network policy", func(t *testing.T) {
			rd := m.deployment(t, redisName)
			np := m.netpol(t, redisName)
			if !labelSelector(t, &np.Spec.PodSelector).Matches(labels.Set(rd.Spec.Template.Labels)) {
				t.Error("podSelector does not select the Redis pods")
			}
			if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
				t.Error("policyTypes must include Ingress")
			}
			if len(np.Spec.Ingress) == 0 {
				t.Fatal("no ingress rule: nothing could reach Redis")
			}
			for i, rule := range np.Spec.Ingress {
				if len(rule.From) == 0 {
					t.Errorf("ingress[%d] has no from: it admits every pod", i)
				}
				for j, peer := range rule.From {
					if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil {
						t.Errorf("ingress[%d].from[%d] must be a podSelector of this namespace only", i, j)
						continue
					}
					if !labelSelector(t, peer.PodSelector).Matches(labels.Set(podLabels)) {
						t.Errorf("ingress[%d].from[%d] does not admit the gateway's pods", i, j)
					}
					if labelSelector(t, peer.PodSelector).Matches(labels.Set(rd.Spec.Template.Labels)) {
						t.Errorf("ingress[%d].from[%d] is too wide: it selects Redis itself", i, j)
					}
				}
				for _, p := range rule.Ports {
					if p.Port == nil || p.Port.IntValue() != 6379 {
						t.Errorf("ingress[%d] opens port %v, want 6379", i, p.Port)
					}
				}
			}
		})
	}

	t.Run("redis eviction", func(t *testing.T) {
		// The cache's Redis evicts any key within its bound; the limits'
		// Redis never holds cache entries.
		args := m.deployment(t, cacheRedis).Spec.Template.Spec.Containers[0].Args
		if i := slices.Index(args, "--maxmemory"); i < 0 || i+1 >= len(args) {
			t.Errorf("%s has no --maxmemory: a cache must be bounded", cacheRedis)
		}
		if i := slices.Index(args, "--maxmemory-policy"); i < 0 || i+1 >= len(args) || !strings.HasPrefix(args[i+1], "allkeys-") {
			t.Errorf("%s: --maxmemory-policy must be allkeys-*: every key is a cache entry or a lease", cacheRedis)
		}
		limits := m.deployment(t, redisName).Spec.Template.Spec.Containers[0].Args
		if i := slices.Index(limits, "--maxmemory-policy"); i >= 0 && i+1 < len(limits) && strings.HasPrefix(limits[i+1], "allkeys-") {
			t.Errorf("%s must not evict keys that have no TTL", redisName)
		}
	})

	t.Run("secret", func(t *testing.T) {
		sec := m.secret(t, gatewayName)
		for k, v := range secretValues(sec) {
			if !strings.Contains(v, "CHANGE-ME") {
				t.Errorf("%s: placeholder value must contain CHANGE-ME, so that no real secret is committed", k)
			}
		}
	})

	t.Run("image", func(t *testing.T) {
		name, _, _ := strings.Cut(ctr.Image, ":")
		if !slices.Contains(m.kustomizeImg, name) {
			t.Errorf("container image %q is not set by the kustomization's images %v", ctr.Image, m.kustomizeImg)
		}
		if len(ctr.Command) > 0 {
			t.Errorf("command %v overrides the image's ENTRYPOINT; give args only", ctr.Command)
		}
	})

	t.Run("configuration", func(t *testing.T) {
		checkGatewayConfig(t, m, gw, ctr)
	})
}

// mountedFromSecret reports whether path lies in a directory the
// container mounts whole (no subPath) from a Secret volume.
func mountedFromSecret(gw *appsv1.Deployment, ctr *corev1.Container, path string) bool {
	for _, vm := range ctr.VolumeMounts {
		if vm.SubPath != "" || filepath.Dir(path) != filepath.Clean(vm.MountPath) {
			continue
		}
		for _, v := range gw.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil {
				return true
			}
		}
	}
	return false
}

// checkGatewayConfig checks the ConfigMap's config.yaml: every ${VAR} comes
// from the Secret through the container's environment, the file is valid
// for package config, and it agrees with the manifests.
func checkGatewayConfig(t *testing.T, m *manifests, gw *appsv1.Deployment, ctr *corev1.Container) {
	cm := m.configMap(t, gatewayName)
	text, ok := cm.Data[configKey]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Name, configKey)
	}

	// Mounted where the container reads it.
	cfgPath := configPathFromArgs(t, ctr.Args)
	mounted := false
	for _, vm := range ctr.VolumeMounts {
		for _, v := range gw.Spec.Template.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil || v.ConfigMap.Name != cm.Name {
				continue
			}
			file := configKey
			for _, it := range v.ConfigMap.Items {
				if it.Key == configKey {
					file = it.Path
				}
			}
			if vm.SubPath == file && vm.MountPath == cfgPath || vm.SubPath == "" && filepath.Join(vm.MountPath, file) == cfgPath {
				mounted = true
				if !vm.ReadOnly {
					t.Errorf("volume mount %s must be readOnly", vm.Name)
				}
			}
		}
	}
	if !mounted {
		t.Errorf("the container reads %s, but ConfigMap %s's %s is not mounted there", cfgPath, cm.Name, configKey)
	}

	// Every ${VAR} is in the environment, from the Secret.
	env := map[string]string{}
	for _, name := range configVars(text) {
		v, err := secretEnv(m, ctr, name)
		if err != nil {
			t.Errorf("${%s}: %v", name, err)
			continue
		}
		env[name] = v
	}
	if t.Failed() {
		return
	}
	// The listeners' certificate comes from a Secret the cluster mounts:
	// a test certificate stands in for it, in a directory of the test's
	// own, and the files are checked below to be mounted from a Secret.
	tlsDir := t.TempDir()
	leaf := testpki.NewCA(t, "deploy test CA").Issue(t, testpki.Options{})
	for name, data := range map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		if err := os.WriteFile(filepath.Join(tlsDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const tlsMount = "/etc/streamgate-tls"
	cfg, err := config.Parse([]byte(strings.ReplaceAll(text, tlsMount+"/", tlsDir+"/")), func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	})
	if err != nil {
		t.Fatalf("%s of ConfigMap %s is not a valid configuration:\n%v", configKey, cm.Name, err)
	}
	onCluster := func(path string) string { return strings.Replace(path, tlsDir, tlsMount, 1) }
	for _, name := range cfg.NetworkNames() {
		if tb := cfg.Networks[name].TLS; tb != nil {
			for _, f := range []string{tb.CertFile, tb.KeyFile, tb.ClientCAFile} {
				if f = onCluster(f); f != "" && !mountedFromSecret(gw, ctr, f) {
					t.Errorf("networks.%s.tls: %s is not in a directory mounted from a Secret (whole, without subPath: a subPath mount never sees a renewal)", name, f)
				}
			}
		}
	}

	// The ports agree with the container and the probes.
	if port := listenPort(t, cfg.Server.AdminListen); port != adminPort {
		t.Errorf("server.admin_listen %q: port %d, want %d (probes and scraping use it)", cfg.Server.AdminListen, port, adminPort)
	}
	if host, _, _ := net.SplitHostPort(cfg.Server.AdminListen); host == "127.0.0.1" || host == "localhost" {
		t.Errorf("server.admin_listen %q is loopback: the kubelet and Prometheus could not reach it", cfg.Server.AdminListen)
	}
	for _, name := range cfg.NetworkNames() {
		n := cfg.Networks[name]
		if n.Upstream.Embedded() {
			t.Errorf("networks.%s.upstream.url is embedded, which the image (-tags nosimulator) refuses", name)
		}
		p, ok := namedPort(ctr, name)
		if !ok || int(p) != listenPort(t, n.Listen) {
			t.Errorf("networks.%s.listen %q has no container port named %s", name, n.Listen, name)
		}
		if n.Upstream.Embedded() || !strings.HasPrefix(n.Upstream.URL, "https://") {
			t.Errorf("networks.%s.upstream.url %q: production calls the real service over https", name, n.Upstream.URL)
		}
	}
	for _, want := range []struct{ network, url string }{
		{"mainnet", "https://api.dataengine.chain.link"},
		{"testnet", "https://api.testnet-dataengine.chain.link"},
	} {
		if n := cfg.Network(want.network); n == nil || n.Upstream.URL != want.url {
			t.Errorf("networks.%s.upstream.url must be %s", want.network, want.url)
		}
	}

	// The cache fits well inside the memory limit.
	memLimit := ctr.Resources.Limits[corev1.ResourceMemory]
	if int64(cfg.Cache.MaxBytes)*2 > memLimit.Value() {
		t.Errorf("cache.max_bytes %v is more than half the memory limit %s", cfg.Cache.MaxBytes, memLimit.String())
	}
	for _, e := range ctr.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		lim, err := config.ParseSize(e.Value)
		if err != nil || int64(lim) >= memLimit.Value() || lim <= cfg.Cache.MaxBytes {
			t.Errorf("GOMEMLIMIT %q must lie between cache.max_bytes and the memory limit %s", e.Value, memLimit.String())
		}
	}

	// Replicas share limits through the Redis of the manifests.
	if cfg.RateLimit.Backend != "redis" {
		t.Errorf("ratelimit.backend %q: replicas must share limits through redis", cfg.RateLimit.Backend)
	}
	u, err := url.Parse(cfg.RateLimit.Redis.URL)
	if err != nil {
		t.Fatal(err)
	}
	svc := m.service(t, redisName)
	if u.Hostname() != svc.Name || u.Port() != strconv.Itoa(int(svc.Spec.Ports[0].Port)) {
		t.Errorf("ratelimit.redis.url %q does not name the Service %s:%d", cfg.RateLimit.Redis.URL, svc.Name, svc.Spec.Ports[0].Port)
	}
	if cfg.RateLimit.Redis.Password == "" {
		t.Error("ratelimit.redis.password is empty, but streamgate-redis requires one")
	} else {
		rc := m.deployment(t, redisName).Spec.Template.Spec.Containers[0]
		i := slices.Index(rc.Args, "--requirepass")
		if i < 0 || i+1 >= len(rc.Args) {
			t.Fatal("streamgate-redis has no --requirepass argument")
		}
		ref, ok := strings.CutPrefix(rc.Args[i+1], "$(")
		ref, _ = strings.CutSuffix(ref, ")")
		if !ok {
			t.Fatalf("--requirepass %q must be an environment reference $(VAR), not the password", rc.Args[i+1])
		}
		got, err := secretEnv(m, &rc, ref)
		if err != nil || got != cfg.RateLimit.Redis.Password.Reveal() {
			t.Errorf("streamgate-redis's password (%s) is not the gateway's ratelimit.redis.password: %v", ref, err)
		}
	}

	// Replicas share their cache through the cache's own Redis.
	sh := cfg.Cache.Shared
	if sh.Backend != config.SharedRedis {
		t.Errorf("cache.shared.backend %q: replicas must share their cache", sh.Backend)
	}
	cu, err := url.Parse(sh.URL)
	if err != nil {
		t.Fatal(err)
	}
	csvc := m.service(t, cacheRedis)
	if cu.Hostname() != csvc.Name || cu.Port() != strconv.Itoa(int(csvc.Spec.Ports[0].Port)) {
		t.Errorf("cache.shared.url %q does not name the Service %s:%d", sh.URL, csvc.Name, csvc.Spec.Ports[0].Port)
	}
	if rc := m.deployment(t, cacheRedis).Spec.Template.Spec.Containers[0]; sh.Password == "" {
		t.Errorf("cache.shared.password is empty, but %s requires one", cacheRedis)
	} else if i := slices.Index(rc.Args, "--requirepass"); i < 0 || i+1 >= len(rc.Args) {
		t.Errorf("%s has no --requirepass argument", cacheRedis)
	} else {
		ref, _ := strings.CutPrefix(rc.Args[i+1], "$(")
		ref, _ = strings.CutSuffix(ref, ")")
		if got, err := secretEnv(m, &rc, ref); err != nil || got != sh.Password.Reveal() {
			t.Errorf("%s's password (%s) is not the gateway's cache.shared.password: %v", cacheRedis, ref, err)
		}
	}

	// SIGTERM drains within shutdown_timeout, after the preStop sleep, before
	// the kubelet's SIGKILL.
	var preStop time.Duration
	if ctr.Lifecycle != nil && ctr.Lifecycle.PreStop != nil {
		switch ps := ctr.Lifecycle.PreStop; {
		case ps.Sleep != nil:
			preStop = time.Duration(ps.Sleep.Seconds) * time.Second
		case ps.Exec != nil:
			t.Error("preStop exec cannot run: the distroless image has no shell or sleep binary; use preStop.sleep")
		}
	}
	grace := time.Duration(deref(gw.Spec.Template.Spec.TerminationGracePeriodSeconds)) * time.Second
	if gw.Spec.Template.Spec.TerminationGracePeriodSeconds == nil {
		grace = 30 * time.Second
	}
	if need := preStop + cfg.Server.ShutdownTimeout; grace <= need {
		t.Errorf("terminationGracePeriodSeconds %v must exceed the preStop sleep plus server.shutdown_timeout (%v)", grace, need)
	}
}

// configVars lists the ${VAR} references of a configuration text as package
// config expands them: "$$" is a literal "$" and comment lines are skipped.
func configVars(text string) []string {
	var names []string
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for i := 0; i < len(line); i++ {
			if line[i] != '$' || i+1 >= len(line) {
				continue
			}
			switch line[i+1] {
			case '$':
				i++
			case '{':
				if end := strings.IndexByte(line[i:], '}'); end > 0 {
					if name := line[i+2 : i+end]; !slices.Contains(names, name) {
						names = append(names, name)
					}
					i += end
				}
			}
		}
	}
	return names
}

// secretEnv returns the value the container's variable name takes from a
// Secret of the manifests, by env valueFrom.secretKeyRef or envFrom
// secretRef. A plain value is an error: configuration secrets live in the
// Secret.
func secretEnv(m *manifests, c *corev1.Container, name string) (string, error) {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			return "", fmt.Errorf("container %s sets %s without a secretKeyRef", c.Name, name)
		}
		ref := e.ValueFrom.SecretKeyRef
		sec, ok := m.secrets[ref.Name]
		if !ok {
			return "", fmt.Errorf("container %s takes %s from Secret %q, which the manifests lack", c.Name, name, ref.Name)
		}
		v, ok := secretValues(sec)[ref.Key]
		if !ok {
			return "", fmt.Errorf("Secret %s has no key %s", ref.Name, ref.Key)
		}
		return v, nil
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef == nil {
			continue
		}
		key, ok := strings.CutPrefix(name, ef.Prefix)
		if sec := m.secrets[ef.SecretRef.Name]; ok && sec != nil {
			if v, ok := secretValues(sec)[key]; ok {
				return v, nil
			}
		}
	}
	return "", fmt.Errorf("container %s does not take it from a Secret", c.Name)
}

// secretValues merges a Secret's data and stringData, as the API server
// does (stringData wins).
func secretValues(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	maps.Copy(out, s.StringData)
	return out
}

func configPathFromArgs(t *testing.T, args []string) string {
	t.Helper()
	i := slices.Index(args, "-config")
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("args %v do not give -config FILE", args)
	}
	return args[i+1]
}

func listenPort(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return n
}

func checkHTTPProbe(t *testing.T, what string, c *corev1.Container, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: want an httpGet probe of %s", what, path)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: path %q, want %q", what, p.HTTPGet.Path, path)
	}
	if n, ok := resolvePort(c, p.HTTPGet.Port); !ok || n != adminPort {
		t.Errorf("%s: port %s, want the admin port %d", what, p.HTTPGet.Port.String(), adminPort)
	}
}

// resolvePort returns the number of a port given by number or by the name
// of one of the container's ports.
func resolvePort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	if p.Type == intstr.Int {
		for _, cp := range c.Ports {
			if cp.ContainerPort == p.IntVal {
				return p.IntVal, true
			}
		}
		return p.IntVal, false
	}
	return namedPort(c, p.StrVal)
}

func namedPort(c *corev1.Container, name string) (int32, bool) {
	for _, cp := range c.Ports {
		if cp.Name == name {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func labelSelector(t *testing.T, s *metav1.LabelSelector) labels.Selector {
	t.Helper()
	if s == nil {
		t.Fatal("label selector missing")
	}
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	if sel.Empty() {
		t.Fatal("empty label selector: it selects everything")
	}
	return sel
}

func container(t *testing.T, d *appsv1.Deployment, name string) *corev1.Container {
	t.Helper()
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("Deployment %s has no container %s", d.Name, name)
	return nil
}

func (m *manifests) deployment(t *testing.T, name string) *appsv1.Deployment {
	return must(t, "Deployment", m.deployments, name)
}

func (m *manifests) service(t *testing.T, name string) *corev1.Service {
	return must(t, "Service", m.services, name)
}

func (m *manifests) configMap(t *testing.T, name string) *corev1.ConfigMap {
	return must(t, "ConfigMap", m.configMaps, name)
}

func (m *manifests) secret(t *testing.T, name string) *corev1.Secret {
	return must(t, "Secret", m.secrets, name)
}

func (m *manifests) pdb(t *testing.T, name string) *policyv1.PodDisruptionBudget {
	return must(t, "PodDisruptionBudget", m.pdbs, name)
}

func (m *manifests) hpa(t *testing.T, name string) *autoscalingv2.HorizontalPodAutoscaler {
	return must(t, "HorizontalPodAutoscaler", m.hpas, name)
}

func (m *manifests) netpol(t *testing.T, name string) *networkingv1.NetworkPolicy {
	return must(t, "NetworkPolicy", m.netpols, name)
}

func must[T any](t *testing.T, kind string, objs map[string]*T, name string) *T {
	t.Helper()
	o, ok := objs[name]
	if !ok {
		t.Fatalf("no %s named %s in %s", kind, name, kubeDir)
	}
	return o
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func isTrue(b *bool) bool { return b != nil && *b }
