// Package v1alpha1 is the hub's aggregated API, group gateway.proxy.open-cluster-management.io: clusters, the managed
// clusters with the cluster-proxy add-on and the state of their tunnels, and clusters/proxy, any request to a cluster's
// kube-apiserver, made there as the hub user who sends it to the hub. The proxy-servers serve it behind the hub
// kube-apiserver (an APIService); nothing of it is stored, so it has no CRD.
// +kubebuilder:object:generate=true
// +kubebuilder:skip
// +k8s:openapi-gen=true
// +groupName=gateway.proxy.open-cluster-management.io
package v1alpha1
