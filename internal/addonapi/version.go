// Package addonapi speaks OCM's add-on API (addon.open-cluster-management.io) at the version the hub serves, under
// one model: the operator's code reads and writes the v1alpha1 types of ManagedClusterAddOn, ClusterManagementAddOn and
// AddOnDeploymentConfig, and where the hub serves v1beta1 (OCM v1.2) the client and the cache of this
// package carry them as v1beta1 on the wire, converting at the boundary as OCM's conversion webhook does. A hub that
// serves only v1alpha1 (OCM v1.0) gets the plain client and cache.
package addonapi

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
)

// Version is a version of the add-on API.
type Version string

const (
	V1alpha1 Version = "v1alpha1"
	V1beta1  Version = "v1beta1"
)

// resources are the add-on API's kinds the operator uses, by resource name.
var resources = []string{"managedclusteraddons", "clustermanagementaddons", "addondeploymentconfigs"}

// Discover returns V1beta1 when the hub serves every kind the operator uses at v1beta1, else V1alpha1.
func Discover(d discovery.DiscoveryInterface) (Version, error) {
	list, err := d.ServerResourcesForGroupVersion(addonv1beta1.GroupVersion.String())
	if apierrors.IsNotFound(err) {
		return V1alpha1, nil
	}
	if err != nil {
		return "", fmt.Errorf("discover %s: %w", addonv1beta1.GroupVersion, err)
	}
	served := make(map[string]bool, len(list.APIResources))
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	for _, r := range resources {
		if !served[r] {
			return V1alpha1, nil
		}
	}
	return V1beta1, nil
}

// DiscoverFor is Discover through cfg.
func DiscoverFor(cfg *rest.Config) (Version, error) {
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return "", err
	}
	return Discover(d)
}
