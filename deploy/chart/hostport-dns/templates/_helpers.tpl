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
{{- if and .Values.pods (or .Values.nodes.excludeTaints .Values.nodes.excludeLabels .Values.nodes.excludeUnschedulable) }}true{{ end -}}
{{- range .Values.pods }}{{ if .topologyKey }}true{{ end }}{{ end -}}
{{- end -}}

{{/* The Secret holding the DNS cookie secrets. */}}
{{- define "hostport-dns.cookieSecret" -}}
{{ .Values.clients.cookies.secretName | default (printf "%s-cookies" .Release.Name) }}
{{- end -}}

{{/* The container's resources: resources.requests.memory and resources.limits.memory, or else
     the memoryLimit formulas of dns.expectedNames (values.yaml explains them). In MiB, rounded
     up. */}}
{{- define "hostport-dns.resources" -}}
{{- $resources := deepCopy .Values.resources -}}
{{- $m := .Values.memoryLimit -}}
{{- $names := int64 .Values.dns.expectedNames -}}
{{- $base := mul (int64 $m.baseMiB) 1048576 -}}
{{- $served := mul $names (int64 $m.bytesPerName) -}}
{{- $limits := deepCopy (default dict $resources.limits) -}}
{{- if not $limits.memory -}}
{{- $_ := set $limits "memory" (printf "%dMi" (div (add $base (mul (int64 $m.growthFactor) $served) 1048575) 1048576)) -}}
{{- end -}}
{{- $requests := deepCopy (default dict $resources.requests) -}}
{{- if not $requests.memory -}}
{{- $_ := set $requests "memory" (printf "%dMi" (div (add $base $served 1048575) 1048576)) -}}
{{- end -}}
{{- $_ := set $resources "limits" $limits -}}
{{- $_ := set $resources "requests" $requests -}}
{{- toYaml $resources -}}
{{- end -}}

{{/* The service account the agent runs as (serviceAccount.create/name). */}}
{{- define "hostport-dns.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default .Release.Name }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{/* The image: repository@digest when a digest is given, else repository:tag (appVersion). */}}
{{- define "hostport-dns.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* --metrics-listen's address: metrics.bindAddress, `node` for the node's address (HOST_IP,
     which the agent accepts unbracketed when it is IPv6), an IPv6 address in brackets. */}}
{{- define "hostport-dns.metricsListen" -}}
{{- $address := .Values.metrics.bindAddress | toString -}}
{{- if eq $address "node" -}}
$(HOST_IP):{{ .Values.metrics.port }}
{{- else if and (contains ":" $address) (not (hasPrefix "[" $address)) -}}
[{{ $address }}]:{{ .Values.metrics.port }}
{{- else -}}
{{ $address }}:{{ .Values.metrics.port }}
{{- end -}}
{{- end -}}

{{/* A probe with httpGet.port defaulting to the metrics port (no named port: the pod declares
     none unless declareHostPorts). */}}
{{- define "hostport-dns.probe" -}}
{{- $probe := deepCopy .probe -}}
{{- if and $probe.httpGet (not $probe.httpGet.port) -}}
{{- $_ := set $probe.httpGet "port" (int .port) -}}
{{- end -}}
{{- toYaml $probe -}}
{{- end -}}

{{- /* Whether one agent is elected to write for others (a Lease in the release namespace). */}}
{{- define "hostport-dns.elects" -}}
{{- if or .Values.externalDns.enabled .Values.update.enabled }}true{{ end -}}
{{- end -}}

{{- /* Whether the TSIG keys are mounted (zone transfers or RFC 2136 updates sign with them). */}}
{{- define "hostport-dns.tsig" -}}
{{- if or .Values.transfer.enabled .Values.update.enabled }}true{{ end -}}
{{- end -}}

{{- /* Where the external-dns objects live. */}}
{{- define "hostport-dns.externalDnsNamespace" -}}
{{ .Values.externalDns.namespace | default .Release.Namespace }}
{{- end -}}
