// Package v1alpha1 contains the API of cluster-proxy-operator, group proxy.open-cluster-management.io.
// +kubebuilder:object:generate=true
// +groupName=proxy.open-cluster-management.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "proxy.open-cluster-management.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ManagedProxyConfiguration{}, &ManagedProxyConfigurationList{},
		&ProxyCertificate{}, &ProxyCertificateList{},
		&ClusterProxyStatus{}, &ClusterProxyStatusList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
