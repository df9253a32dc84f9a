package clusteragent

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/proxyenv"
)

const (
	addonGroup = "addon.open-cluster-management.io"
	adcs       = "addondeploymentconfigs"
	mpcs       = "managedproxyconfigurations"

	// ReasonConfigNotFound: a configuration the add-on references does not exist.
	ReasonConfigNotFound = "ConfigurationNotFound"
)

// resolveConfigs reads the ManagedProxyConfiguration and the AddOnDeploymentConfig that apply to the cluster: the
// add-on's spec.configs first, then the ClusterManagementAddOn's defaults. A missing one is a problem to report.
func (r *Reconciler) resolveConfigs(ctx context.Context, s *scope) error {
	mpcName, _, mpcField := configRef(s.mca, nil, proxyv1alpha1.GroupVersion.Group, mpcs)
	cma := &addonv1alpha1.ClusterManagementAddOn{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Name: proxyv1alpha1.AddonName}, cma); ctrl.IgnoreNotFound(err) != nil {
		return err
	}
	if mpcName == "" {
		mpcName, mpcField = proxyv1alpha1.DefaultConfigurationName, "ClusterManagementAddOn cluster-proxy defaults"
	}
	s.mpc = &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Name: mpcName}, s.mpc); err != nil {
		s.mpc = nil
		if ctrl.IgnoreNotFound(err) != nil {
			return err
		}
		s.problem = &proxyenv.FieldError{Field: mpcField, Reason: ReasonConfigNotFound,
			Message: fmt.Sprintf("ManagedProxyConfiguration %s not found: create it or fix the reference", mpcName)}
		return nil
	}

	name, ns, field := configRef(s.mca, cma, addonGroup, adcs)
	if name == "" {
		return nil
	}
	s.adcRef = ns + "/" + name
	s.adc = &addonv1alpha1.AddOnDeploymentConfig{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Namespace: ns, Name: name}, s.adc); err != nil {
		s.adc = nil
		if ctrl.IgnoreNotFound(err) != nil {
			return err
		}
		s.problem = &proxyenv.FieldError{Field: field, Reason: ReasonConfigNotFound,
			Message: fmt.Sprintf("AddOnDeploymentConfig %s not found: create it or fix the reference", s.adcRef)}
	}
	return nil
}

// ADCRefField indexes the add-ons by the AddOnDeploymentConfig they name in spec.configs ("namespace/name"), or
// usesDefaultADC when they name none and so take the ClusterManagementAddOn's default: an edit of one
// AddOnDeploymentConfig re-queues only the add-ons it applies to.
const ADCRefField = "spec.configs.addondeploymentconfigs"

// usesDefaultADC is the ADCRefField value of add-ons that name no AddOnDeploymentConfig.
const usesDefaultADC = "<default>"

// IndexAddOnsByADC registers ADCRefField.
func IndexAddOnsByADC(ctx context.Context, indexer ctrl.FieldIndexer) error {
	return indexer.IndexField(ctx, &addonv1alpha1.ManagedClusterAddOn{}, ADCRefField, adcRefOf)
}

func adcRefOf(o ctrl.Object) []string {
	mca, ok := o.(*addonv1alpha1.ManagedClusterAddOn)
	if !ok {
		return nil
	}
	if name, ns, _ := configRef(mca, nil, addonGroup, adcs); name != "" {
		return []string{ns + "/" + name}
	}
	return []string{usesDefaultADC}
}

// addOnsOfADC are the add-ons an AddOnDeploymentConfig applies to: those that name it, and, when it is the
// ClusterManagementAddOn's default, those that name none. Another add-on's config queues nothing.
func (r *Reconciler) addOnsOfADC(ctx context.Context, adc ctrl.Object) []reconcile.Request {
	keys := []string{adc.GetNamespace() + "/" + adc.GetName()}
	cma := &addonv1alpha1.ClusterManagementAddOn{}
	if err := r.Client.Get(ctx, ctrl.ObjectKey{Name: proxyv1alpha1.AddonName}, cma); err == nil {
		if name, ns, _ := configRef(&addonv1alpha1.ManagedClusterAddOn{}, cma, addonGroup, adcs); name == adc.GetName() && ns == adc.GetNamespace() {
			keys = append(keys, usesDefaultADC)
		}
	}
	var reqs []reconcile.Request
	for _, key := range keys {
		list := &addonv1alpha1.ManagedClusterAddOnList{}
		if err := r.Client.List(ctx, list, ctrl.MatchingFields{ADCRefField: key}); err != nil {
			return nil
		}
		for i := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: ctrl.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return reqs
}

// ConfigurationOf names the ManagedProxyConfiguration the add-on's agent is rendered from: the first
// managedproxyconfigurations entry of its spec.configs, else (or when that entry has no name) the default
// configuration.
func ConfigurationOf(mca *addonv1alpha1.ManagedClusterAddOn) string {
	if name, _, _ := configRef(mca, nil, proxyv1alpha1.GroupVersion.Group, mpcs); name != "" {
		return name
	}
	return proxyv1alpha1.DefaultConfigurationName
}

// configRef finds the config of group/resource in the add-on's spec.configs, else in the ClusterManagementAddOn's
// defaults, and says which field it came from.
func configRef(mca *addonv1alpha1.ManagedClusterAddOn, cma *addonv1alpha1.ClusterManagementAddOn, group, resource string) (name, namespace, field string) {
	for i, c := range mca.Spec.Configs {
		if c.Group == group && c.Resource == resource {
			ns := c.Namespace
			if ns == "" {
				ns = mca.Namespace
			}
			return c.Name, ns, fmt.Sprintf("ManagedClusterAddOn %s/%s spec.configs[%d]", mca.Namespace, mca.Name, i)
		}
	}
	if cma == nil {
		return "", "", ""
	}
	for i, c := range cma.Spec.SupportedConfigs {
		if c.Group == group && c.Resource == resource && c.DefaultConfig != nil {
			return c.DefaultConfig.Name, c.DefaultConfig.Namespace, fmt.Sprintf("ClusterManagementAddOn cluster-proxy spec.supportedConfigs[%d].defaultConfig", i)
		}
	}
	return "", "", ""
}

func ownerRef(mca *addonv1alpha1.ManagedClusterAddOn) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: addonv1alpha1.GroupVersion.String(), Kind: "ManagedClusterAddOn", Name: mca.Name, UID: mca.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}
