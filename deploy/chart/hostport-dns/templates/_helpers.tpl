{{- define "hostport-dns.name" -}}{{ .Release.Name }}{{- end -}}

{{- define "hostport-dns.labels" -}}
app.kubernetes.io/name: hostport-dns
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "hostport-dns.selector" -}}
app.kubernetes.io/name: hostport-dns
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Whether any pod source watches all namespaces (cluster-wide pod RBAC). */}}
{{- define "hostport-dns.podsClusterWide" -}}
{{- range .Values.pods }}{{ if not .namespaces }}true{{ end }}{{ end -}}
{{- end -}}

{{/* Whether any EndpointSlice output reads node addresses (node RBAC). */}}
{{- define "hostport-dns.needsNodes" -}}
{{- range .Values.endpointSlices }}{{ if ne (.addressSource | default "endpointslice") "endpointslice" }}true{{ end }}{{ end -}}
{{- end -}}

{{/* The Secret holding the DNS cookie secrets. */}}
{{- define "hostport-dns.cookieSecret" -}}
{{ .Values.clients.cookies.secretName | default (printf "%s-cookies" .Release.Name) }}
{{- end -}}
