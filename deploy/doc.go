// Package deploy holds streamgate's deployment files: the container image
// (Dockerfile), Kubernetes manifests (kubernetes/), a Helm chart
// (helm/streamgate/), a local multi-replica compose setup (compose/), a
// Grafana dashboard (grafana/) and Prometheus alert rules (prometheus/).
// It has no code; its tests check those files against the Kubernetes API
// types, the configuration schema of package config and the metrics the
// gateway registers, and render the chart with Helm's own engine. See
// README.md.
package deploy
