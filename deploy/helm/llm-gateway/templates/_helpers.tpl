{{/* Names, labels and the values every template derives the same way. */}}

{{- define "llm-gateway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-llm-gateway", or the release name alone when it already holds the chart's. */}}
{{- define "llm-gateway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 40 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "llm-gateway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of an object; call with (dict "root" $ "component" "gateway" ["tier" "x"]). */}}
{{- define "llm-gateway.labels" -}}
helm.sh/chart: {{ include "llm-gateway.chart" .root }}
{{ include "llm-gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: llm-gateway
{{- end }}

{{/* The labels a Service, a PDB, a NetworkPolicy or a ScaledObject selects pods by. */}}
{{- define "llm-gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llm-gateway.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .tier }}
llm-gateway/tier: {{ . }}
{{- end }}
{{- end }}

{{- define "llm-gateway.secretName" -}}
{{- default (printf "%s-secrets" (include "llm-gateway.fullname" .)) .Values.secrets.name }}
{{- end }}

{{- define "llm-gateway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The grace period: pinned, or preStop + drain + 15 s (the supervisor's 5 s and a margin). */}}
{{- define "llm-gateway.gracePeriod" -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add (int .Values.preStopSeconds) (int .Values.drainSeconds) 15 }}
{{- else }}
{{- int .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/* Mean requests in flight over the release's gateway pods (Little's law on the latency sum). */}}
{{- define "llm-gateway.inFlightQuery" -}}
{{- printf "sum(rate(gateway_request_latency_seconds_sum{namespace=\"%s\",service=\"%s\"}[%s]))" .Release.Namespace (include "llm-gateway.fullname" .) .Values.autoscaling.window }}
{{- end }}

{{/* The profiles' data (files/engines.yaml, rendered by `python -m deploy.render`). */}}
{{- define "llm-gateway.profiles" -}}
{{- .Files.Get "files/engines.yaml" }}
{{- end }}

{{/* Maps merged key by key, the second winning; lists and scalars are replaced whole. */}}
{{- define "llm-gateway.merge" -}}
{{- $out := deepCopy .base }}
{{- range $k, $v := .over }}
{{- $b := index $out $k }}
{{- if and (kindIs "map" $v) (kindIs "map" $b) }}
{{- $_ := set $out $k (include "llm-gateway.merge" (dict "base" $b "over" $v) | fromYaml) }}
{{- else }}
{{- $_ := set $out $k $v }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
A tier's settings: engineDefaults overridden by tiers.<tier>, router = routerDefaults
overridden by tiers.<tier>.router, plus `profile` (its entry in files/engines.yaml, or
nothing), `name`, `engineName` and `routerName`. Call with (dict "root" $ "tier" "x").
*/}}
{{- define "llm-gateway.tier" -}}
{{- $root := .root }}
{{- $t := index $root.Values.tiers .tier }}
{{- $cfg := include "llm-gateway.merge" (dict "base" $root.Values.engineDefaults "over" (omit $t "router")) | fromYaml }}
{{- $router := include "llm-gateway.merge" (dict "base" $root.Values.routerDefaults "over" ($t.router | default dict)) | fromYaml }}
{{- $profiles := (include "llm-gateway.profiles" $root | fromYaml).tiers | default dict }}
{{- $profile := index $profiles .tier | default dict }}
{{- if and $cfg.engine (not $profile) }}
{{- fail (printf "tiers.%s: no profile engines/profiles/%s.yaml in files/engines.yaml; set tiers.%s.engine false and give its urls" .tier .tier .tier) }}
{{- end }}
{{- if and $router.enabled (not $cfg.engine) }}
{{- fail (printf "tiers.%s.router needs the tier's engines (tiers.%s.engine true)" .tier .tier) }}
{{- end }}
{{- $full := include "llm-gateway.fullname" $root }}
{{- $_ := set $cfg "router" $router }}
{{- $_ := set $cfg "profile" $profile }}
{{- $_ := set $cfg "name" .tier }}
{{- $_ := set $cfg "engineName" (printf "%s-sglang-%s" $full .tier) }}
{{- $_ := set $cfg "routerName" (printf "%s-router-%s" $full .tier) }}
{{- toYaml $cfg }}
{{- end }}

{{/* The base URLs the gateway sends a tier's traffic to (comma-separated; empty: the rules'). */}}
{{- define "llm-gateway.tierUrls" -}}
{{- $cfg := include "llm-gateway.tier" . | fromYaml }}
{{- if $cfg.router.enabled }}
{{- printf "http://%s:%d" $cfg.routerName (int $cfg.router.port) }}
{{- else if $cfg.engine }}
{{- printf "http://%s:%d" $cfg.engineName (int $cfg.port) }}
{{- else }}
{{- join "," $cfg.urls }}
{{- end }}
{{- end }}

{{/* SGLang's waiting requests for a tier's model in the release's namespace. */}}
{{- define "llm-gateway.queueQuery" -}}
{{- printf "sum(sglang:num_queue_reqs{namespace=\"%s\",model_name=\"%s\"})" .namespace .model }}
{{- end }}

{{/* The pod spec's imagePullSecrets; use as {{- include "llm-gateway.pullSecrets" (dict "root" $ "indent" 6) }}. */}}
{{- define "llm-gateway.pullSecrets" -}}
{{- with .root.Values.imagePullSecrets }}
{{- printf "imagePullSecrets:" | nindent $.indent }}
{{- range . }}
{{- printf "  - name: %s" . | nindent $.indent }}
{{- end }}
{{- end }}
{{- end }}

{{/* The tiers' names in a stable order. */}}
{{- define "llm-gateway.tierNames" -}}
{{- keys .Values.tiers | sortAlpha | join " " }}
{{- end }}

{{/* "true" when some tier runs a router, else empty. */}}
{{- define "llm-gateway.anyRouter" -}}
{{- $any := false }}
{{- range $tier := splitList " " (include "llm-gateway.tierNames" .) }}
{{- $cfg := include "llm-gateway.tier" (dict "root" $ "tier" $tier) | fromYaml }}
{{- if $cfg.router.enabled }}{{ $any = true }}{{ end }}
{{- end }}
{{- if $any }}true{{ end }}
{{- end }}
