// Package addoninstall installs the add-on on the clusters the ClusterManagementAddOn's placements select. The
// ClusterManagementAddOn becomes the owner of every add-on of its name in the add-on's own pass (package
// clusteragent).
package addoninstall

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/addonconfig"
)

// InstalledByLabel marks the add-ons the Placements install strategy created; only those are removed when their
// cluster leaves the placements, so add-ons users created by hand stay.
const InstalledByLabel = "proxy.open-cluster-management.io/installed-by"

// Reconciler installs the add-on on the clusters that the ClusterManagementAddOn's placements select, and
// removes it from clusters that leave them. With the Manual strategy users create ManagedClusterAddOns themselves.
type Reconciler struct {
	Client client.Client
}

// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=placementdecisions,verbs=get;list;watch
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=clustermanagementaddons,resourceNames=cluster-proxy,verbs=get;list;watch
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=managedclusteraddons,verbs=create
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=managedclusteraddons,resourceNames=cluster-proxy,verbs=get;list;watch;update;delete

// Reconcile makes the installed add-ons match the placements.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cma := &addonv1alpha1.ClusterManagementAddOn{}
	if err := r.Client.Get(ctx, req.NamespacedName, cma); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cma.Spec.InstallStrategy.Type != addonv1alpha1.AddonInstallStrategyPlacements {
		return ctrl.Result{}, nil
	}
	wanted, err := r.decidedClusters(ctx, cma)
	if err != nil {
		return ctrl.Result{}, err
	}
	existing := &addonv1alpha1.ManagedClusterAddOnList{}
	// The cache holds only the add-ons named cluster-proxy. They are read, not copied: at 10,000 clusters a copy of
	// them all was about 20 MB per pass. An add-on written below is copied first.
	if err := r.Client.List(ctx, existing, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, err
	}
	for i := range existing.Items {
		mca := &existing.Items[i] // shares its maps and slices with the cache: copied before a change
		configs, keep := wanted[mca.Namespace]
		delete(wanted, mca.Namespace)
		switch {
		case mca.Labels[InstalledByLabel] != "placement":
			// created by a user: theirs to manage
		case !keep:
			if err := r.Client.Delete(ctx, mca); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
		case !equality.Semantic.DeepEqual(mca.Spec.Configs, configs):
			mca = mca.DeepCopy()
			mca.Spec.Configs = configs
			if err := r.Client.Update(ctx, mca); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	for cluster, configs := range wanted {
		if err := r.Client.Create(ctx, installedAddOn(cma, cluster, configs)); client.IgnoreAlreadyExists(err) != nil {
			return ctrl.Result{}, fmt.Errorf("install the add-on on cluster %s: %w", cluster, err)
		}
	}
	return ctrl.Result{}, nil
}

// decidedClusters are the clusters the placements selected, with the configs of the first placement that did.
func (r *Reconciler) decidedClusters(ctx context.Context, cma *addonv1alpha1.ClusterManagementAddOn) (map[string][]addonv1alpha1.AddOnConfig, error) {
	wanted := map[string][]addonv1alpha1.AddOnConfig{}
	for _, p := range cma.Spec.InstallStrategy.Placements {
		decisions := &clusterv1beta1.PlacementDecisionList{}
		if err := r.Client.List(ctx, decisions, client.InNamespace(p.Namespace), client.MatchingLabels{clusterv1beta1.PlacementLabel: p.Name}); err != nil {
			return nil, err
		}
		for _, d := range decisions.Items {
			for _, c := range d.Status.Decisions {
				if _, seen := wanted[c.ClusterName]; !seen {
					wanted[c.ClusterName] = p.Configs
				}
			}
		}
	}
	return wanted, nil
}

func installedAddOn(cma *addonv1alpha1.ClusterManagementAddOn, cluster string, configs []addonv1alpha1.AddOnConfig) *addonv1alpha1.ManagedClusterAddOn {
	return &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{
			Name: proxyv1alpha1.AddonName, Namespace: cluster,
			Labels:          map[string]string{InstalledByLabel: "placement"},
			OwnerReferences: []metav1.OwnerReference{addonconfig.CMAOwner(cma)},
		},
		Spec: addonv1alpha1.ManagedClusterAddOnSpec{Configs: configs},
	}
}

// SetupWithManager registers the reconciler: placement decisions and the add-ons re-queue the ClusterManagementAddOn.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	onlyOurAddOn := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == proxyv1alpha1.AddonName })
	toCMA := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: proxyv1alpha1.AddonName}}}
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&addonv1alpha1.ClusterManagementAddOn{}, builder.WithPredicates(onlyOurAddOn)).
		Watches(&clusterv1beta1.PlacementDecision{}, toCMA).
		Watches(&addonv1alpha1.ManagedClusterAddOn{}, toCMA, builder.WithPredicates(onlyOurAddOn, addOnInputChanged)).
		Named("addoninstall").
		WithOptions(opts).
		Complete(r)
}

// addOnInputChanged passes what a pass reads of an add-on: that it exists, its deletion, its installed-by label and
// its spec. Not its status, which the clusteragent reconciler and OCM's agents keep writing: each pass
// lists every add-on, so at 10,000 clusters a pass per status write would make the install quadratic.
var addOnInputChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, after := e.ObjectOld, e.ObjectNew
	return before.GetGeneration() != after.GetGeneration() ||
		before.GetDeletionTimestamp().IsZero() != after.GetDeletionTimestamp().IsZero() ||
		before.GetLabels()[InstalledByLabel] != after.GetLabels()[InstalledByLabel]
}}
