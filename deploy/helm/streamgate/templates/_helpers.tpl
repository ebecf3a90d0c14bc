{{/* The chart's name. */}}
{{- define "streamgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, the name of its objects. */}}
{{- define "streamgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "streamgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The gateway pods' selector. */}}
{{- define "streamgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "streamgate.labels" -}}
helm.sh/chart: {{ include "streamgate.chart" . }}
{{ include "streamgate.selectorLabels" . }}
app.kubernetes.io/part-of: streamgate
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "streamgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "streamgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "streamgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{- define "streamgate.configMapName" -}}
{{- .Values.existingConfigMap | default (include "streamgate.fullname" .) }}
{{- end }}

{{/*
The port of a listen address: ":8080", "0.0.0.0:8080", "[::]:8080".
*/}}
{{- define "streamgate.listenPort" -}}
{{- $parts := splitList ":" (toString .) }}
{{- last $parts | int }}
{{- end }}

{{/*
The listener ports as a JSON object, name -> port: .Values.ports, or each
network's listen port under the network's name and the admin listener's
under "admin". Networks sharing a listener share its port, named after the
first of them.
*/}}
{{- define "streamgate.ports" -}}
{{- $ports := dict }}
{{- if .Values.ports }}
{{- $ports = .Values.ports }}
{{- else }}
{{- if .Values.existingConfigMap }}
{{- fail "ports must be given with existingConfigMap: the chart cannot read that ConfigMap" }}
{{- end }}
{{- $seen := dict }}
{{- range $name, $n := (.Values.config.networks | default dict) }}
{{- if not $n.listen }}
{{- fail (printf "config.networks.%s.listen is required" $name) }}
{{- end }}
{{- $p := include "streamgate.listenPort" $n.listen }}
{{- if not (hasKey $seen $p) }}
{{- $_ := set $seen $p $name }}
{{- $_ := set $ports $name ($p | int) }}
{{- end }}
{{- end }}
{{- $admin := dig "server" "admin_listen" "" (.Values.config | default dict) }}
{{- if not $admin }}
{{- fail "config.server.admin_listen is required: the probes and Prometheus use the admin listener" }}
{{- end }}
{{- if or (hasPrefix "127." $admin) (hasPrefix "localhost:" $admin) (hasPrefix "[::1]" $admin) }}
{{- fail (printf "config.server.admin_listen %q is loopback: the kubelet's probes and Prometheus could not reach it" $admin) }}
{{- end }}
{{- $_ := set $ports "admin" (include "streamgate.listenPort" $admin | int) }}
{{- end }}
{{- if not (hasKey $ports "admin") }}
{{- fail "ports.admin is required: the probes use it" }}
{{- end }}
{{- toJson $ports }}
{{- end }}

{{/*
The configuration file: .Values.config with the keys the chart owns.
*/}}
{{- define "streamgate.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $server := get $cfg "server" | default dict }}
{{- if hasKey $server "shutdown_timeout" }}
{{- fail "config.server.shutdown_timeout is the chart's: set shutdown.timeout (seconds), which the grace period follows" }}
{{- end }}
{{- $_ := set $server "shutdown_timeout" (printf "%ds" (.Values.shutdown.timeout | int)) }}
{{- $_ := set $cfg "server" $server }}
{{- $rt := get $cfg "realtime" | default dict }}
{{- if hasKey $rt "drain_delay" }}
{{- fail "config.realtime.drain_delay is the chart's: set shutdown.drainDelay (seconds)" }}
{{- end }}
{{- $_ := set $rt "drain_delay" (printf "%ds" (.Values.shutdown.drainDelay | int)) }}
{{- $_ := set $cfg "realtime" $rt }}
{{- if .Values.tls.enabled }}
{{- $block := dict "cert_file" (printf "%s/tls.crt" .Values.tls.mountPath) "key_file" (printf "%s/tls.key" .Values.tls.mountPath) }}
{{- if .Values.tls.clientCA.enabled }}
{{- $_ := set $block "client_ca_file" (printf "%s/%s" .Values.tls.clientCA.mountPath .Values.tls.clientCA.key) }}
{{- $_ := set $block "client_auth" .Values.tls.clientCA.clientAuth }}
{{- end }}
{{- range $name, $n := (get $cfg "networks" | default dict) }}
{{- if not (hasKey $n "tls") }}
{{- $_ := set $n "tls" (deepCopy $block) }}
{{- end }}
{{- end }}
{{- end }}
{{- if hasKey $cfg "archive" }}
{{- fail "config.archive is the chart's: set archive.enabled and archive.*" }}
{{- end }}
{{- if .Values.archive.enabled }}
{{- $a := dict "backend" .Values.archive.backend }}
{{- if eq .Values.archive.backend "pebble" }}
{{- $_ := set $a "path" .Values.archive.pebble.path }}
{{- else if eq .Values.archive.backend "postgres" }}
{{- if not .Values.archive.postgres.url }}
{{- fail "archive.postgres.url is required with backend postgres" }}
{{- end }}
{{- $pg := dict "url" .Values.archive.postgres.url }}
{{- if .Values.archive.postgres.passwordSecret.name }}
{{- $_ := set $pg "password_file" (printf "%s/%s" .Values.archive.postgres.mountPath .Values.archive.postgres.passwordSecret.key) }}
{{- end }}
{{- $_ := set $a "postgres" $pg }}
{{- else }}
{{- fail (printf "archive.backend %q: pebble or postgres" .Values.archive.backend) }}
{{- end }}
{{- $a = merge $a (deepCopy .Values.archive.config) }}
{{- $_ := set $cfg "archive" $a }}
{{- end }}
{{- /*
toYaml writes '${VAR}' as a plain ${VAR}: a value that is one reference
is quoted again, so that a secret holding ": ", " #" or a leading "*"
stays one string once expanded.
*/}}
{{- regexReplaceAll "(?m)^(\\s*(?:- )?[^\\s#'\"][^:#]*: |\\s*- )(\\$\\{[A-Za-z_][A-Za-z0-9_]*\\})$" (toYaml $cfg) "${1}'${2}'" }}
{{- end }}

{{/* Checks of values that no template would catch. */}}
{{- define "streamgate.validate" -}}
{{- if gt (mul 2 (.Values.shutdown.drainDelay | int)) (.Values.shutdown.timeout | int) }}
{{- fail "shutdown.drainDelay must be at most half of shutdown.timeout" }}
{{- end }}
{{- if and .Values.archive.enabled (eq .Values.archive.backend "pebble") (or .Values.autoscaling.enabled (gt (.Values.replicaCount | int) 1)) }}
{{- fail "archive.backend pebble is one process's store on one volume: use it with replicaCount 1 and no autoscaling, or use postgres for a fleet" }}
{{- end }}
{{- end }}
