// Package scheme is the runtime.Scheme of every kind the operator reads or writes: Kubernetes' own, this operator's
// API, OCM's cluster, work and add-on APIs (the add-on API at both versions), and sig-multicluster's ClusterProfile. The manager, its tests and the local
// system build their clients from it; it imports no other package of this repository but the API.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// New returns a scheme with every kind the operator reads or writes.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, proxyv1alpha1.AddToScheme, addonv1alpha1.Install, addonv1beta1.Install, clusterv1.Install, clusterv1beta1.Install, workv1.Install,
		cpv1alpha1.AddToScheme, apiregistrationv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err) // only on a programming error: the kinds are compiled in
		}
	}
	return s
}
