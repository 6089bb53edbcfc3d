{{/*
Names. Kubernetes names are cut to 63 characters; helpers that add a suffix leave room for it.
*/}}

{{- define "lockstep.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "lockstep.fullname" -}}
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

{{- define "lockstep.namespace" -}}
{{- .Release.Namespace }}
{{- end }}

{{- define "lockstep.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
"<fullname>-<suffix>", the full name cut so that the result stays within 63 characters.
Usage: include "lockstep.suffixed" (list . "dashboard")
*/}}
{{- define "lockstep.suffixed" -}}
{{- $root := index . 0 }}
{{- $suffix := index . 1 }}
{{- printf "%s-%s" (include "lockstep.fullname" $root | trunc (int (sub 62 (len $suffix))) | trimSuffix "-") $suffix }}
{{- end }}

{{/* The operator's Deployment, Services and ServiceAccount share this stem. */}}
{{- define "lockstep.operator.fullname" -}}
{{- printf "%s-operator" (include "lockstep.fullname" . | trunc 54 | trimSuffix "-") }}
{{- end }}

{{- define "lockstep.webhook.serviceName" -}}
{{- printf "%s-webhook" (include "lockstep.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "lockstep.reports.serviceName" -}}
{{- printf "%s-reports" (include "lockstep.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{- define "lockstep.metrics.serviceName" -}}
{{- printf "%s-metrics" (include "lockstep.fullname" . | trunc 55 | trimSuffix "-") }}
{{- end }}

{{/* Secret holding tls.crt, tls.key and ca.crt of the operator's serving certificate. */}}
{{- define "lockstep.tls.secretName" -}}
{{- printf "%s-tls" (include "lockstep.fullname" . | trunc 59 | trimSuffix "-") }}
{{- end }}

{{- define "lockstep.peering.name" -}}
{{- default (include "lockstep.fullname" .) .Values.operator.peering.name }}
{{- end }}

{{- define "lockstep.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lockstep.operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Labels.
*/}}
{{- define "lockstep.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lockstep.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "lockstep.labels" -}}
helm.sh/chart: {{ include "lockstep.chart" . }}
app.kubernetes.io/name: {{ include "lockstep.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: lockstep
{{- end }}

{{/*
Images. A digest, when given, wins over the tag.
*/}}
{{- define "lockstep.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* The sidecar image defaults to the operator's image: one image serves both. */}}
{{- define "lockstep.sidecar.image" -}}
{{- if .Values.sidecar.image.repository }}
{{- $tag := default .Chart.AppVersion .Values.sidecar.image.tag }}
{{- if .Values.sidecar.image.digest }}
{{- printf "%s@%s" .Values.sidecar.image.repository .Values.sidecar.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.sidecar.image.repository $tag }}
{{- end }}
{{- else }}
{{- include "lockstep.image" . }}
{{- end }}
{{- end }}

{{/*
Service DNS names that the serving certificate must cover.
*/}}
{{- define "lockstep.tls.dnsNames" -}}
{{- $ns := include "lockstep.namespace" . }}
{{- range $svc := list (include "lockstep.webhook.serviceName" .) (include "lockstep.reports.serviceName" .) }}
- {{ $svc }}
- {{ $svc }}.{{ $ns }}
- {{ $svc }}.{{ $ns }}.svc
- {{ $svc }}.{{ $ns }}.svc.cluster.local
{{- end }}
{{- end }}

{{/* Base URL the sidecars use to reach the report endpoint. */}}
{{- define "lockstep.reports.url" -}}
{{- printf "https://%s.%s.svc:%d" (include "lockstep.reports.serviceName" .) (include "lockstep.namespace" .) 8443 }}
{{- end }}

{{/* Namespaces the pod webhook never touches: its own (no deadlock) and the control plane's. */}}
{{- define "lockstep.webhook.excludedNamespaces" -}}
{{- $excluded := list (include "lockstep.namespace" .) "kube-system" }}
{{- concat $excluded .Values.webhook.excludeNamespaces | uniq | toJson }}
{{- end }}

{{/*
Shards (docs/scale.md#sharding). A LabelSelector of values as the text the operator's options take
("k=v,k in (a,b),k notin (a),k,!k"; empty without a requirement).
Usage: include "lockstep.selectorText" (list .Values.shard.resourceSelector "shard.resourceSelector")
*/}}
{{- define "lockstep.selectorText" -}}
{{- $selector := index . 0 }}
{{- $name := index . 1 }}
{{- $parts := list }}
{{- range $key, $value := $selector.matchLabels }}
{{- $parts = append $parts (printf "%s=%s" $key (toString $value)) }}
{{- end }}
{{- range $selector.matchExpressions }}
{{- if eq .operator "In" }}
{{- $parts = append $parts (printf "%s in (%s)" .key (join "," .values)) }}
{{- else if eq .operator "NotIn" }}
{{- $parts = append $parts (printf "%s notin (%s)" .key (join "," .values)) }}
{{- else if eq .operator "Exists" }}
{{- $parts = append $parts .key }}
{{- else if eq .operator "DoesNotExist" }}
{{- $parts = append $parts (printf "!%s" .key) }}
{{- else }}
{{- fail (printf "%s.matchExpressions: operator %q is not In, NotIn, Exists or DoesNotExist" $name (toString .operator)) }}
{{- end }}
{{- end }}
{{- join "," $parts }}
{{- end }}

{{/* The operator's --watch-label-selector and --watch-pod-selector. */}}
{{- define "lockstep.shard.labelSelector" -}}
{{- include "lockstep.selectorText" (list .Values.shard.resourceSelector "shard.resourceSelector") }}
{{- end }}
{{- define "lockstep.shard.podSelectorText" -}}
{{- include "lockstep.selectorText" (list .Values.shard.podSelector "shard.podSelector") }}
{{- end }}

{{- define "lockstep.shard.hasPodSelector" -}}
{{- if or .Values.shard.podSelector.matchLabels .Values.shard.podSelector.matchExpressions }}true{{ end }}
{{- end }}

{{/*
objectSelector of a pod webhook: shard.podSelector, plus the inject label for the webhook of pods opted
in one by one. Usage: include "lockstep.webhook.podObjectSelector" (dict "root" . "optIn" true)
*/}}
{{- define "lockstep.webhook.podObjectSelector" -}}
{{- $pods := .root.Values.shard.podSelector }}
{{- $labels := deepCopy (default (dict) $pods.matchLabels) }}
{{- if .optIn }}
{{- $_ := set $labels .root.Values.webhook.injectLabel.key .root.Values.webhook.injectLabel.value }}
{{- end }}
{{- if or $labels $pods.matchExpressions }}
objectSelector:
  {{- with $labels }}
  matchLabels:
    {{- range $key, $value := . }}
    {{ $key }}: {{ toString $value | quote }}
    {{- end }}
  {{- end }}
  {{- with $pods.matchExpressions }}
  matchExpressions: {{ toJson . }}
  {{- end }}
{{- end }}
{{- end }}

{{/*
Render-time checks of contradictory values.
*/}}
{{- define "lockstep.checks" -}}
{{- if and .Values.tls.certManager.enabled .Values.tls.certManager.issuerRef.name (not .Values.tls.certManager.issuerRef.kind) }}
{{- fail "tls.certManager.issuerRef.kind is required when tls.certManager.issuerRef.name is set" }}
{{- end }}
{{- if and (include "lockstep.shard.labelSelector" .) (not (include "lockstep.shard.hasPodSelector" .)) }}
{{- fail "shard.resourceSelector needs shard.podSelector: without it this release's webhook injects every opted-in pod, those of the other shards too" }}
{{- end }}
{{- if and (gt (int .Values.operator.replicaCount) 1) (not .Values.operator.peering.enabled) }}
{{- fail "operator.replicaCount > 1 needs operator.peering.enabled: without peering every replica would handle every resource" }}
{{- end }}
{{- end }}

{{/*
Helm-generated TLS material as JSON {ca, crt, key}, base64-encoded PEM. The CA and serving certificate
are made once, at first install, and reused on every upgrade by looking up the existing Secret, so the
webhook caBundle and the CA the sidecars trust stay valid across upgrades. Within one render the
material is cached in .Values so the Secret, the webhook configurations and the checksum agree.
`helm template` cannot look up and so shows a fresh pair each time.
*/}}
{{- define "lockstep.tls.material" -}}
{{- if not (hasKey .Values "_lockstepTlsCache") }}
{{- $secretName := include "lockstep.tls.secretName" . }}
{{- $existing := lookup "v1" "Secret" (include "lockstep.namespace" .) $secretName }}
{{- $data := dict }}
{{- if $existing }}
{{- $data = default (dict) $existing.data }}
{{- end }}
{{- if and (hasKey $data "ca.crt") (hasKey $data "tls.crt") (hasKey $data "tls.key") }}
{{- $_ := set .Values "_lockstepTlsCache" (dict "ca" (index $data "ca.crt") "crt" (index $data "tls.crt") "key" (index $data "tls.key")) }}
{{- else }}
{{- $days := int .Values.tls.validityDays }}
{{- $caPair := genCA (include "lockstep.suffixed" (list . "ca")) $days }}
{{- $cn := printf "%s.%s.svc" (include "lockstep.webhook.serviceName" .) (include "lockstep.namespace" .) }}
{{- $dnsNames := include "lockstep.tls.dnsNames" . | fromYamlArray }}
{{- $cert := genSignedCert $cn nil $dnsNames $days $caPair }}
{{- $_ := set .Values "_lockstepTlsCache" (dict "ca" ($caPair.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) }}
{{- end }}
{{- end }}
{{- index .Values "_lockstepTlsCache" | toJson }}
{{- end }}

{{/* caBundle for the webhook configurations when Helm generates the TLS material. */}}
{{- define "lockstep.tls.caBundle" -}}
{{- (include "lockstep.tls.material" . | fromJson).ca }}
{{- end }}

{{/*
Pieces shared by the webhook configurations.
*/}}
{{- define "lockstep.webhook.annotations" -}}
{{- if .Values.tls.certManager.enabled }}
annotations:
  cert-manager.io/inject-ca-from: {{ include "lockstep.namespace" . }}/{{ include "lockstep.tls.secretName" . }}
{{- end }}
{{- end }}
{{- define "lockstep.webhook.clientConfig" -}}
clientConfig:
  service:
    name: {{ include "lockstep.webhook.serviceName" .root }}
    namespace: {{ include "lockstep.namespace" .root }}
    path: {{ .path }}
    port: 443
  {{- if not .root.Values.tls.certManager.enabled }}
  caBundle: {{ include "lockstep.tls.caBundle" .root }}
  {{- end }}
{{- end }}
{{- define "lockstep.webhook.podRules" -}}
rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["pods"]
    scope: Namespaced
{{- end }}

{{/*
Rules for the namespaced API calls of the operator. Keep in step with the operator's code:
tests/chart/test_rbac.py derives the same list from operator/*.py.
*/}}
{{- define "lockstep.rbac.namespacedRules" -}}
# Watch MCPServerInterfaces (kopf), list them to resync and to bind a pod at admission.
- apiGroups: ["lockstep.dev"]
  resources: ["mcpserverinterfaces"]
  verbs: ["list", "watch"]
# Write the observed revisions, pod counts and conditions.
- apiGroups: ["lockstep.dev"]
  resources: ["mcpserverinterfaces/status"]
  verbs: ["patch"]
# Watch the pods, list them to resync, read the pod a report comes from.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# Enforcement Quarantine: watch the Services, to report one that sends traffic past the proxy.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch"]
# Set the readiness condition lockstep.dev/interface-verified.
- apiGroups: [""]
  resources: ["pods/status"]
  verbs: ["patch"]
# Record drift, verification and admission problems as Events.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
# Keep definitions of observed revisions too large for status in ConfigMaps owned by the resource:
# list them at start, create, read and patch one that exists, delete it once approved or unserved.
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "create", "patch", "delete"]
{{- end }}

{{/*
Command line of `lockstep operator`. Options are passed as flags, not environment variables, so a flag
the operator does not know fails at start instead of being ignored. tests/chart/test_operator_args.py
parses these arguments with the operator's own click command.
*/}}
{{- define "lockstep.operator.args" -}}
- operator
{{- if eq .Values.logLevel "debug" }}
- --verbose
{{- end }}
{{- range .Values.operator.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
{{- with include "lockstep.shard.labelSelector" . }}
- {{ printf "--watch-label-selector=%s" . | quote }}
{{- end }}
{{- with include "lockstep.shard.podSelectorText" . }}
- {{ printf "--watch-pod-selector=%s" . | quote }}
{{- end }}
- --tls-cert=/etc/lockstep/tls/tls.crt
- --tls-key=/etc/lockstep/tls/tls.key
- --operator-ca=/etc/lockstep/tls/ca.crt
- --report-url={{ include "lockstep.reports.url" . }}
- --own-namespace={{ include "lockstep.namespace" . }}
- --sidecar-image={{ include "lockstep.sidecar.image" . }}
- --sidecar-resources={{ .Values.sidecar.resources | toJson }}
- --token-expiration={{ int .Values.sidecar.tokenExpirationSeconds }}
- --body-limit={{ int .Values.operator.reports.bodyLimitBytes }}
- --rate-per-pod={{ .Values.operator.reports.ratePerPod }}
- --rate-burst={{ int .Values.operator.reports.rateBurst }}
{{- if .Values.operator.peering.enabled }}
- --peering={{ include "lockstep.peering.name" . }}
{{- end }}
{{- range .Values.webhook.allowOptOut }}
- --allow-opt-out={{ . }}
{{- end }}
{{- end }}

{{/* Environment of the operator container. POD_ID names the replica in kopf peering. */}}
{{- define "lockstep.operator.env" -}}
- name: POD_ID
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
# Its own namespace: never injected, and the home of the peering object when watchNamespaces is set.
- name: LOCKSTEP_OWN_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- if .Values.operator.peering.enabled }}
# Published in the peering object: a standby relays the reports it gets to the leader's address.
- name: LOCKSTEP_POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- end }}
