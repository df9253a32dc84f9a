// Package addonconfig decides which configurations apply to a cluster's add-on, the OCM way: the add-on's
// spec.configs first, then the ClusterManagementAddOn's defaults. It also names the ClusterManagementAddOn as the
// add-on's owner.
package addonconfig

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

// The config kinds the add-on supports.
const (
	AddOnGroup                 = "addon.open-cluster-management.io"
	AddOnDeploymentConfigs     = "addondeploymentconfigs"
	ManagedProxyConfigurations = "managedproxyconfigurations"
)

// Ref names a config and the field it came from, for error messages.
type Ref struct {
	Name, Namespace string
	// Field is where the reference is written, e.g. "ManagedClusterAddOn c1/cluster-proxy spec.configs[0]".
	Field string
	// FromAddOn says the reference is the add-on's own (spec.configs), not the ClusterManagementAddOn's default.
	FromAddOn bool
}

// Find finds the config of group/resource in the add-on's spec.configs, else (cma may be nil) in the
// ClusterManagementAddOn's defaults; a zero Ref when neither names one. A reference in spec.configs without a
// namespace means the add-on's.
func Find(mca *addonv1alpha1.ManagedClusterAddOn, cma *addonv1alpha1.ClusterManagementAddOn, group, resource string) Ref {
	for i, c := range mca.Spec.Configs {
		if c.Group == group && c.Resource == resource {
			ns := c.Namespace
			if ns == "" {
				ns = mca.Namespace
			}
			return Ref{Name: c.Name, Namespace: ns, Field: fmt.Sprintf("ManagedClusterAddOn %s/%s spec.configs[%d]", mca.Namespace, mca.Name, i),
				FromAddOn: true}
		}
	}
	if cma == nil {
		return Ref{}
	}
	for i, c := range cma.Spec.SupportedConfigs {
		if c.Group == group && c.Resource == resource && c.DefaultConfig != nil {
			return Ref{Name: c.DefaultConfig.Name, Namespace: c.DefaultConfig.Namespace,
				Field: fmt.Sprintf("ClusterManagementAddOn %s spec.supportedConfigs[%d].defaultConfig", cma.Name, i)}
		}
	}
	return Ref{}
}

// ADC finds the AddOnDeploymentConfig of the add-on (see Find).
func ADC(mca *addonv1alpha1.ManagedClusterAddOn, cma *addonv1alpha1.ClusterManagementAddOn) Ref {
	return Find(mca, cma, AddOnGroup, AddOnDeploymentConfigs)
}

// DefaultADC is the ClusterManagementAddOn's default AddOnDeploymentConfig: the one of every add-on that names none.
func DefaultADC(cma *addonv1alpha1.ClusterManagementAddOn) Ref {
	return ADC(&addonv1alpha1.ManagedClusterAddOn{}, cma)
}

// MPC finds the ManagedProxyConfiguration the add-on's agent is rendered from: the first managedproxyconfigurations
// entry of its spec.configs, else (or when that entry has no name) the default configuration.
func MPC(mca *addonv1alpha1.ManagedClusterAddOn) Ref {
	if ref := Find(mca, nil, proxyv1alpha1.GroupVersion.Group, ManagedProxyConfigurations); ref.Name != "" {
		return ref
	}
	return Ref{Name: proxyv1alpha1.DefaultConfigurationName, Field: "ClusterManagementAddOn cluster-proxy defaults"}
}

// ConfigurationOf names the ManagedProxyConfiguration of the add-on (see MPC).
func ConfigurationOf(mca *addonv1alpha1.ManagedClusterAddOn) string { return MPC(mca).Name }

// CMAOwner is the owner reference of an add-on to its ClusterManagementAddOn, as OCM's addon-owner controller writes
// it: deleting the ClusterManagementAddOn removes its add-ons through the garbage collector.
func CMAOwner(cma *addonv1alpha1.ClusterManagementAddOn) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: addonv1alpha1.GroupVersion.String(), Kind: "ClusterManagementAddOn", Name: cma.Name, UID: cma.UID,
		BlockOwnerDeletion: ptr.To(true)}
}
