{{/*
The three services, in stream order. Templates that make one object per
service range over this list.
*/}}
{{- define "tidal.components" -}}
collector decider actuator
{{- end }}

{{/* Chart name, overridable. */}}
{{- define "tidal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name every resource name starts with: the release name, followed by the
chart name unless the release name already holds it. Kept at 50 characters so
FULLNAME-collector and the like stay within 63.
*/}}
{{- define "tidal.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* FULLNAME-COMPONENT; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.componentName" -}}
{{- printf "%s-%s" (include "tidal.fullname" .root) .component }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "tidal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "tidal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tidal
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Labels of one service's objects; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.componentLabels" -}}
{{ include "tidal.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Selector of one service's pods; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tidal.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Name of one service's ServiceAccount; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.serviceAccountName" -}}
{{- $sa := (index .root.Values .component).serviceAccount }}
{{- if $sa.create }}
{{- default (include "tidal.componentName" .) $sa.name }}
{{- else }}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .component .component) $sa.name }}
{{- end }}
{{- end }}

{{/* Image of one service; call with (dict "root" $ "component" "collector"). A digest pins it: REPOSITORY@DIGEST, the tag unused. */}}
{{- define "tidal.image" -}}
{{- $img := (index .root.Values .component).image }}
{{- $repo := default (printf "%s/tidal-%s" .root.Values.image.registry .component) $img.repository }}
{{- $tag := default (default .root.Chart.AppVersion .root.Values.image.tag) $img.tag }}
{{- if $img.digest }}
{{- printf "%s@%s" $repo $img.digest }}
{{- else }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{/* In-cluster DNS name of one service's Service; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.serviceHost" -}}
{{- printf "%s.%s.svc" (include "tidal.componentName" .) .root.Release.Namespace }}
{{- end }}

{{/* Whether the NetworkPolicies are made: networkPolicy.enabled, where auto means in Knative mode. */}}
{{- define "tidal.networkPolicyOn" -}}
{{- $np := .Values.networkPolicy.enabled }}
{{- if eq (toString $np) "auto" }}{{ $np = .Values.knative.enabled }}{{ end }}
{{- if $np }}true{{ end }}
{{- end }}

{{/* Whether KEDA's pods call the collector: tls.keda's or authz.keda's identities. */}}
{{- define "tidal.kedaOn" -}}
{{- if and (include "tidal.tlsOn" .) (or .Values.tls.keda .Values.authz.keda) }}true{{ end }}
{{- end }}

{{/* Whether the services run mutual TLS. */}}
{{- define "tidal.tlsOn" -}}
{{- if ne .Values.tls.mode "disabled" }}true{{ end }}
{{- end }}

{{/* SPIFFE ID of one service's ServiceAccount; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.spiffeID" -}}
{{- printf "spiffe://%s/ns/%s/sa/%s" .root.Values.tls.trustDomain .root.Release.Namespace (include "tidal.serviceAccountName" .) }}
{{- end }}

{{/* SPIFFE ID of KEDA's client certificate (tls.keda). */}}
{{- define "tidal.kedaID" -}}
{{- printf "spiffe://%s/ns/%s/sa/%s-keda" .Values.tls.trustDomain .Release.Namespace (include "tidal.fullname" .) }}
{{- end }}

{{/* SPIFFE ID of the read-only client certificate for people. */}}
{{- define "tidal.readerID" -}}
{{- printf "spiffe://%s/ns/%s/sa/%s-reader" .Values.tls.trustDomain .Release.Namespace (include "tidal.fullname" .) }}
{{- end }}

{{/* Name of one service's TLS Secret; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.tlsSecretName" -}}
{{- $given := "" }}
{{- if eq .root.Values.tls.mode "secret" }}{{ $given = index .root.Values.tls.secrets .component }}{{ end }}
{{- default (printf "%s-tls" (include "tidal.componentName" .)) $given }}
{{- end }}

{{/* DNS names of one service's Service, for its certificate; call with (dict "root" $ "component" "collector"). */}}
{{- define "tidal.serviceDNSNames" -}}
{{- $svc := include "tidal.componentName" . }}
{{- $ns := .root.Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/* Mount path of the TLS Secret. */}}
{{- define "tidal.tlsDir" -}}
/etc/tidal/tls
{{- end }}

{{/*
Port of the Services Knative's activators reach the collectors by: 8080, the
port they dial; named http as in Knative's own autoscaler Service.
*/}}
{{- define "tidal.activatorServicePort" -}}
- name: http
  port: 8080
  targetPort: activator
  protocol: TCP
  appProtocol: kubernetes.io/ws
{{- end }}
