{{/* Labels every object of the release carries. */}}
{{- define "cluster-proxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: cluster-proxy-operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of the manager pods (the same as config/manager). */}}
{{- define "cluster-proxy.selectorLabels" -}}
app.kubernetes.io/name: cluster-proxy-operator
{{- end -}}

{{/* The operator image: image.repository and image.tag, or the add-on's registry for a mirror of it. */}}
{{- define "cluster-proxy.image" -}}
{{- $repository := "quay.io/cluster-proxy-operator/cluster-proxy-operator" -}}
{{- $tag := printf "v%s" .Chart.AppVersion -}}
{{- if kindIs "map" .Values.image -}}
{{- $repository = .Values.image.repository -}}
{{- $tag = default $tag .Values.image.tag -}}
{{- end -}}
{{- if and .Values.registry (ne .Values.registry (include "cluster-proxy.addonRegistry" .)) -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" .Values.registry) (base $repository) -}}
{{- end -}}
{{- printf "%s:%s" $repository $tag -}}
{{- end -}}

{{/* The manager's pull policy: image.pullPolicy, IfNotPresent with the add-on's image value. */}}
{{- define "cluster-proxy.pullPolicy" -}}
{{- if kindIs "map" .Values.image -}}{{ default "IfNotPresent" .Values.image.pullPolicy }}{{- else -}}IfNotPresent{{- end -}}
{{- end -}}

{{/* The entrypoint type of the default ManagedProxyConfiguration. */}}
{{- define "cluster-proxy.entrypointType" -}}
{{- if .Values.proxyServer.entrypointType -}}
{{- .Values.proxyServer.entrypointType -}}
{{- else if .Values.proxyServer.entrypointAddress -}}
Hostname
{{- else if .Values.proxyServer.entrypointLoadBalancer -}}
LoadBalancerService
{{- else -}}
PortForward
{{- end -}}
{{- end -}}

{{/* The Placement the Placements install strategy uses: name and namespace. */}}
{{- define "cluster-proxy.placementName" -}}
{{- default "cluster-proxy-placement" .Values.installByPlacement.placementName -}}
{{- end -}}
{{- define "cluster-proxy.placementNamespace" -}}
{{- default .Release.Namespace .Values.installByPlacement.placementNamespace -}}
{{- end -}}
