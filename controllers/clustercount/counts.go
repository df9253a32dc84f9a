// Package clustercount keeps the cluster counts of every ManagedProxyConfiguration (status.clustersInstalled and
// status.clustersConnected): how many clusters whose agents it renders have them installed, and connected. It writes
// those two fields alone, a while after the clusters change, so a hub whose agents connect by the thousand costs one
// count per configuration every few seconds, not a pass of the hub objects per change.
package clustercount

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
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
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
)

// DefaultDelay is how long a change of a cluster's agent waits before the configurations count again: the changes
// of every cluster in that time make one pass, and at most one status write, per configuration, however large the
// hub.
const DefaultDelay = 5 * time.Second

// Reconciler counts the clusters of one ManagedProxyConfiguration.
type Reconciler struct {
	Client client.Client
	// Delay is how long a change waits before it is counted (DefaultDelay when zero); tests shorten it.
	Delay time.Duration
}

// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=managedproxyconfigurations,verbs=get;list;watch
// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=managedproxyconfigurations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=clusterproxystatuses,verbs=get;list;watch
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=managedclusteraddons,resourceNames=cluster-proxy,verbs=get;list;watch

// Reconcile writes the configuration's counts when they changed. Both lists come from the cache without a copy;
// neither is modified.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, req.NamespacedName, mpc); err != nil || !mpc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	addOns := &addonv1alpha1.ManagedClusterAddOnList{} // the cache holds only the add-ons named cluster-proxy
	if err := r.Client.List(ctx, addOns, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("list ManagedClusterAddOns to count clusters: %w", err)
	}
	statuses := &proxyv1alpha1.ClusterProxyStatusList{}
	if err := r.Client.List(ctx, statuses, client.UnsafeDisableDeepCopy); err != nil {
		return ctrl.Result{}, fmt.Errorf("list ClusterProxyStatuses to count clusters: %w", err)
	}
	after := mpc.DeepCopy()
	after.Status.ClustersInstalled, after.Status.ClustersConnected = countClusters(mpc.Name, addOns.Items, statuses.Items)
	// Locked to the resourceVersion read: the configuration's own reconciler writes the rest of the status.
	err := apply.UpdateStatus(ctx, r.Client, mpc, after)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	return ctrl.Result{}, err
}

// countClusters counts, among the clusters whose add-on uses the configuration mpcName, those whose agent is
// installed and those whose agent is connected. A status without an add-on is not counted: its add-on was deleted and
// the garbage collector removes the status next.
func countClusters(mpcName string, addOns []addonv1alpha1.ManagedClusterAddOn, statuses []proxyv1alpha1.ClusterProxyStatus) (installed, connected int32) {
	uses := make(map[string]bool, len(addOns)) // cluster namespace -> its add-on uses mpcName
	for i := range addOns {
		if addOns[i].Name == proxyv1alpha1.AddonName && addonconfig.ConfigurationOf(&addOns[i]) == mpcName {
			uses[addOns[i].Namespace] = true
		}
	}
	for i := range statuses {
		cps := &statuses[i]
		if !uses[cps.Namespace] {
			continue
		}
		inst, conn := agentCounts(cps)
		installed += inst
		connected += conn
	}
	return installed, connected
}

// agentCounts is what one cluster's status adds to the counts.
func agentCounts(cps *proxyv1alpha1.ClusterProxyStatus) (installed, connected int32) {
	if cps.Status.Installed {
		installed = 1
	}
	if meta.IsStatusConditionTrue(cps.Status.Conditions, proxyv1alpha1.ConditionAgentConnected) {
		connected = 1
	}
	return installed, connected
}

// agentCountsChanged passes the ClusterProxyStatus events that can change a count: a status that counts appearing or
// going, and a change of installed or of the AgentConnected condition's status. Probes, latencies and certificates,
// most of the status writes, do not pass.
var agentCountsChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool {
		return counts(e.Object)
	},
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldI, oldC := agentCounts(e.ObjectOld.(*proxyv1alpha1.ClusterProxyStatus))
		newI, newC := agentCounts(e.ObjectNew.(*proxyv1alpha1.ClusterProxyStatus))
		return oldI != newI || oldC != newC
	},
	DeleteFunc: func(e event.DeleteEvent) bool {
		return counts(e.Object)
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// counts reports whether a ClusterProxyStatus adds to any count; an object of another type (a tombstone) might.
func counts(o client.Object) bool {
	cps, ok := o.(*proxyv1alpha1.ClusterProxyStatus)
	if !ok {
		return true
	}
	i, c := agentCounts(cps)
	return i+c > 0
}

// addOnConfigurationChanged passes the add-on updates that move a cluster from one configuration to another. Add-ons
// created or deleted need no event of their own: their ClusterProxyStatus is created or deleted after them.
var addOnConfigurationChanged = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return addonconfig.ConfigurationOf(e.ObjectOld.(*addonv1alpha1.ManagedClusterAddOn)) !=
			addonconfig.ConfigurationOf(e.ObjectNew.(*addonv1alpha1.ManagedClusterAddOn))
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// recountLater re-queues every configuration Delay after an event, so the events of many clusters coalesce
// into one pass per configuration (the queue keeps the earliest time of an item already waiting). Every
// configuration, because a deleted status's add-on may be gone and with it the way to tell which one it counted for;
// configurations are few.
func (r *Reconciler) recountLater() handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		list := &proxyv1alpha1.ManagedProxyConfigurationList{}
		if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Cannot list ManagedProxyConfigurations to count their clusters")
			return
		}
		for i := range list.Items {
			q.AddAfter(reconcile.Request{NamespacedName: client.ObjectKey{Name: list.Items[i].Name}}, r.delay())
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q)
		},
		UpdateFunc: func(ctx context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q)
		},
		DeleteFunc: func(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q)
		},
	}
}

func (r *Reconciler) delay() time.Duration {
	if r.Delay > 0 {
		return r.Delay
	}
	return DefaultDelay
}

// SetupWithManager registers the reconciler: a new configuration is counted at once; the clusters' installs,
// connections and moves between configurations re-count every configuration a while later.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&proxyv1alpha1.ManagedProxyConfiguration{}, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(event.UpdateEvent) bool { return false },
		})).
		Watches(&proxyv1alpha1.ClusterProxyStatus{}, r.recountLater(), builder.WithPredicates(agentCountsChanged)).
		Watches(&addonv1alpha1.ManagedClusterAddOn{}, r.recountLater(), builder.WithPredicates(addOnConfigurationChanged)).
		Named("clustercount").
		WithOptions(opts).
		Complete(r)
}
