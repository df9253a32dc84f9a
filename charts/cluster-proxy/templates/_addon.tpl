{{/*
The existing OCM cluster-proxy add-on's values (its chart's values.yaml), for a values file written for it: each
means here what it meant there, or the template fails with a message that names what replaces it. The chart's
README lists them ("Values of the existing add-on").
*/}}

{{/* The add-on's default image repository, for proxyServerImage and proxyAgentImage, and its default registry. */}}
{{- define "cluster-proxy.addonImage" -}}quay.io/open-cluster-management/cluster-proxy{{- end -}}
{{- define "cluster-proxy.addonRegistry" -}}quay.io/open-cluster-management{{- end -}}

{{/* addonValues fails on an add-on value that has no meaning here; the ManagedProxyConfiguration's template includes it. */}}
{{- define "cluster-proxy.addonValues" -}}
{{- if and (kindIs "string" .Values.image) (ne .Values.image "cluster-proxy") -}}
{{- fail (printf "image=%s is the existing add-on's image name, whose programs cannot run with this operator: set image.repository (and image.tag) to this operator's image, or registry alone for a mirror of it" .Values.image) -}}
{{- end -}}
{{- if .Values.tag -}}
{{- fail (printf "tag=%v is the existing add-on's image tag: this operator's is image.tag (default: v<the chart's appVersion>)" .Values.tag) -}}
{{- end -}}
{{- if and .Values.proxyServerImage (ne .Values.proxyServerImage (include "cluster-proxy.addonImage" .)) -}}
{{- fail (printf "proxyServerImage=%s is the existing add-on's proxy-server image, which does not take this operator's flags: set proxyServer.image to a full reference of this operator's image (empty: image)" .Values.proxyServerImage) -}}
{{- end -}}
{{- if and .Values.proxyAgentImage (ne .Values.proxyAgentImage (include "cluster-proxy.addonImage" .)) -}}
{{- fail (printf "proxyAgentImage=%s is the existing add-on's proxy-agent image, which does not take this operator's flags: set proxyAgent.image to a full reference of this operator's image (empty: image)" .Values.proxyAgentImage) -}}
{{- end -}}
{{- if and (kindIs "bool" .Values.enableKubeApiProxy) (not .Values.enableKubeApiProxy) -}}
{{- fail "enableKubeApiProxy=false: this operator always serves each cluster's kube-apiserver through its tunnel; hub RBAC on clusters/proxy decides who reaches it (userServer.hubAuthorization). Remove the value" -}}
{{- end -}}
{{- if and (kindIs "bool" .Values.enableImpersonation) (not .Values.enableImpersonation) -}}
{{- fail "enableImpersonation=false: this operator reviews hub tokens on the hub and sends hub users on as impersonation, always (agents get no TokenReview right); tokens of a managed cluster reach it as before. Remove the value" -}}
{{- end -}}
{{- with .Values.proxyServer.imagePullPolicy -}}
{{- if ne . "IfNotPresent" -}}
{{- fail (printf "proxyServer.imagePullPolicy=%s: the proxy-servers and agents pull IfNotPresent; pin proxyServer.image and proxyAgent.image by tag or digest instead (image.pullPolicy is the manager's)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* userServerEnabled is "true" when the user-server serves: userServer.enabled, or the add-on's enableServiceProxy. */}}
{{- define "cluster-proxy.userServerEnabled" -}}
{{- if or .Values.userServer.enabled .Values.enableServiceProxy -}}true{{- end -}}
{{- end -}}

{{/* agentNamespace is the add-on's spokeAddonNamespace when it is not the default one, else empty. */}}
{{- define "cluster-proxy.agentNamespace" -}}
{{- if and .Values.spokeAddonNamespace (ne .Values.spokeAddonNamespace "open-cluster-management-cluster-proxy") -}}
{{- .Values.spokeAddonNamespace -}}
{{- end -}}
{{- end -}}
