{{/* Labels of every object; the component is added per object. */}}
{{- define "latticekv.labels" -}}
app.kubernetes.io/name: latticekv
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The Secret holding cluster-secret and password. */}}
{{- define "latticekv.secretName" -}}
{{- default "latticekv" .Values.auth.existingSecret }}
{{- end }}

{{/* Front address of the memory tier's pod 0: every node and the monitor join through it. */}}
{{- define "latticekv.seed" -}}
{{- printf "latticekv-memory-0.latticekv-memory.%s.svc:7700" .Release.Namespace }}
{{- end }}

{{- define "latticekv.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) }}
{{- end }}
