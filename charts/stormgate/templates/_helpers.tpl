{{/* The release's image tag: image.tag, else the chart's appVersion. */}}
{{- define "stormgate.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{- define "stormgate.controlImage" -}}
{{ .Values.image.control }}:{{ include "stormgate.tag" . }}
{{- end -}}

{{- define "stormgate.sidecarImage" -}}
{{ .Values.webhook.inject.sidecarImage | default (printf "%s:%s" .Values.image.sidecar (include "stormgate.tag" .)) }}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "stormgate.labels" -}}
app.kubernetes.io/part-of: stormgate
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "stormgate.tag" . | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The control plane's in-cluster address, for the sidecars. */}}
{{- define "stormgate.xdsAddress" -}}
stormgate-control-plane.{{ .Release.Namespace }}.svc:18000
{{- end -}}

{{/* The self-signed bootstrap's CA, generated once per rendering and shared by every template. */}}
{{- define "stormgate.selfSignedCA" -}}
{{- if not .Values._ca -}}
{{- $_ := set .Values "_ca" (genCA "stormgate-ca" 3650) -}}
{{- end -}}
{{- end -}}
