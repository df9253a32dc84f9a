package clusteragent

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/addonconfig"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/extendedspec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
)

// resolveConfigs reads the ManagedProxyConfiguration and the AddOnDeploymentConfig that apply to the cluster: the
// add-on's spec.configs first, then the ClusterManagementAddOn's defaults. A missing one is a problem to report.
func (r *Reconciler) resolveConfigs(ctx context.Context, s *scope) error {
	cma := &addonv1alpha1.ClusterManagementAddOn{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Name: proxyv1alpha1.AddonName}, cma); {
	case err == nil:
		s.cma = cma
	case !apierrors.IsNotFound(err):
		return err
	}
	mpcRef := addonconfig.MPC(s.mca)
	s.mpc = &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: mpcRef.Name}, s.mpc); err != nil {
		s.mpc = nil
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		s.problem = &proxyenv.FieldError{Field: mpcRef.Field, Reason: proxyv1alpha1.ReasonConfigNotFound,
			Message: fmt.Sprintf("ManagedProxyConfiguration %s not found: create it or fix the reference", mpcRef.Name)}
		return nil
	}
	extendedspec.Restore(s.mpc) // the agents keep their settings when a client of the add-on's types dropped them
	ref := addonconfig.ADC(s.mca, cma)
	name, ns, field := ref.Name, ref.Namespace, ref.Field
	if name == "" {
		return nil
	}
	s.adcRef = ns + "/" + name
	if ref.FromAddOn && ns != s.mca.Namespace {
		// Whoever may edit this cluster's add-on must not get another namespace's proxy credentials into its agent.
		s.problem = &proxyenv.FieldError{Field: field + ".namespace", Reason: proxyv1alpha1.ReasonConfigOfAnotherNamespace,
			Message: fmt.Sprintf("AddOnDeploymentConfig %s is not in the cluster's namespace %s: put one there, or make it the "+
				"ClusterManagementAddOn's default", s.adcRef, s.mca.Namespace)}
		return nil
	}
	s.adc = &addonv1alpha1.AddOnDeploymentConfig{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s.adc); err != nil {
		s.adc = nil
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		s.problem = &proxyenv.FieldError{Field: field, Reason: proxyv1alpha1.ReasonConfigNotFound,
			Message: fmt.Sprintf("AddOnDeploymentConfig %s not found: create it or fix the reference", s.adcRef)}
	}
	return nil
}

// addOnsOfADC are the add-ons an AddOnDeploymentConfig applies to: those that name it, and, when it is the
// ClusterManagementAddOn's default, those that name none. Another add-on's config queues nothing.
func (r *Reconciler) addOnsOfADC(ctx context.Context, adc client.Object) []reconcile.Request {
	keys := []string{adc.GetNamespace() + "/" + adc.GetName()}
	cma := &addonv1alpha1.ClusterManagementAddOn{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: proxyv1alpha1.AddonName}, cma); err == nil {
		if ref := addonconfig.DefaultADC(cma); ref.Name == adc.GetName() && ref.Namespace == adc.GetNamespace() {
			keys = append(keys, index.UsesDefaultADC)
		}
	}
	var reqs []reconcile.Request
	for _, key := range keys {
		reqs = append(reqs, index.Requests(ctx, r.Client, &addonv1alpha1.ManagedClusterAddOnList{}, client.MatchingFields{index.AddOnADC: key})...)
	}
	return reqs
}

func ownerRef(mca *addonv1alpha1.ManagedClusterAddOn) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: addonv1alpha1.GroupVersion.String(), Kind: "ManagedClusterAddOn", Name: mca.Name, UID: mca.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}
