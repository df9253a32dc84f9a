// Package clusteragent installs and keeps the proxy-agent of every managed cluster, the OCM way: it serves the
// ManagedClusterAddOn cluster-proxy of each cluster (status, registrations, configs), renders the agent ManifestWork
// from the ManagedProxyConfiguration and the cluster's AddOnDeploymentConfig, and keeps the cluster's
// ClusterProxyStatus. Approving the agents' CSRs is package agentcsr's job, installing the add-on package
// addoninstall's.
package clusteragent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/addonconfig"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
)

// Reconciler keeps the agent of one managed cluster, keyed by its ManagedClusterAddOn cluster-proxy.
type Reconciler struct {
	Client client.Client
	// APIReader confirms, uncached, that a cluster is gone before its add-on is deleted: a cluster created just
	// before its add-on may not be in the cache yet.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Tunnels reports tunnel health and re-queues the clusters whose tunnel changed; nil leaves the tunnel
	// conditions Unknown and the add-on's Available to OCM's Lease check.
	Tunnels TunnelSource

	// wroteOver holds, for each add-on whose status a pass wrote and whose owner it left to a later pass, the
	// resourceVersion that write was locked to: a later pass that reads the add-on at that version reads a cache
	// that has not seen the write yet, and would only meet a conflict.
	wroteOver sync.Map
}

// scope is what one pass reads and decides.
type scope struct {
	mca *addonv1alpha1.ManagedClusterAddOn
	// mcaRead is the add-on's resourceVersion as the pass read it; mca follows the pass's own writes.
	mcaRead string
	// cma is the ClusterManagementAddOn cluster-proxy, nil when there is none.
	cma *addonv1alpha1.ClusterManagementAddOn
	// cluster is the ManagedCluster's metadata, all a pass reads of it: that it exists, its deletion, its annotations.
	cluster *metav1.PartialObjectMetadata
	mpc     *proxyv1alpha1.ManagedProxyConfiguration
	adc     *addonv1alpha1.AddOnDeploymentConfig
	adcRef  string // namespace/name of the ADC in effect, "" for none
	summary *render.AgentSummary
	// problem is what the user must fix before the agent can be (re)deployed; the last good work stays.
	problem *proxyenv.FieldError
	work    *workv1.ManifestWork // live (as read, or as this pass wrote it), nil when none is known
	// cps is the ClusterProxyStatus with the status this pass computed, cpsBefore as read or created.
	cps, cpsBefore *proxyv1alpha1.ClusterProxyStatus
	// requeue is when to look again whatever happens meanwhile (the agent certificate's expiry), 0 for never.
	requeue time.Duration
	// deployed is set by a pass that created or replaced the agent work or created the ClusterProxyStatus;
	// adoptLater by one that left the add-on's owner to a pass of low priority (see adopt).
	deployed, adoptLater bool
}

// Only the add-on cluster-proxy of each cluster: the cache lists them by that name (a create names no object to RBAC).
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=managedclusteraddons,verbs=create
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=managedclusteraddons,resourceNames=cluster-proxy,verbs=get;list;watch;update;delete
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=managedclusteraddons/status,resourceNames=cluster-proxy,verbs=get;update;patch
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=addondeploymentconfigs,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.open-cluster-management.io,resources=managedclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=work.open-cluster-management.io,resources=manifestworks,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=clusterproxystatuses,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=clusterproxystatuses/status,verbs=get;update;patch

// Reconcile brings one cluster's agent, add-on status and ClusterProxyStatus in line.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if req.Name != proxyv1alpha1.AddonName {
		return ctrl.Result{}, nil
	}
	mca := &addonv1alpha1.ManagedClusterAddOn{}
	if err := r.Client.Get(ctx, req.NamespacedName, mca); err != nil {
		if apierrors.IsNotFound(err) {
			r.wroteOver.Delete(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err) // the work and status are owned by it and go with it
	}
	if rv, ok := r.wroteOver.Load(req.NamespacedName); ok {
		if rv == mca.ResourceVersion {
			// The cache has yet to see the last write; under load that takes more than a second.
			return ctrl.Result{RequeueAfter: adoptAfter}, nil
		}
		r.wroteOver.Delete(req.NamespacedName)
	}
	if !mca.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	s := &scope{mca: mca, mcaRead: mca.ResourceVersion, cluster: &metav1.PartialObjectMetadata{}}
	s.cluster.SetGroupVersionKind(clusterv1.SchemeGroupVersion.WithKind("ManagedCluster"))
	err := r.Client.Get(ctx, client.ObjectKey{Name: mca.Namespace}, s.cluster)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: mca.Namespace}, s.cluster)
	}
	if apierrors.IsNotFound(err) || (err == nil && !s.cluster.DeletionTimestamp.IsZero()) {
		// The cluster is gone: remove its add-on, and with it (owner references) the work and the status.
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, mca))
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	// The phases run in order; each reads what the ones before it decided. The add-on's Available condition is
	// derived from the ClusterProxyStatus, so that status is computed before the add-on's is written, and written
	// after, so the next pass sees the add-on's Configured condition already in place. The add-on's owner comes
	// last: the agent and the statuses do not wait for it.
	for _, phase := range []func(context.Context, *scope) error{
		r.resolveConfigs, r.reconcileWork, r.prepareClusterStatus, r.applyAddOnStatus, r.writeClusterStatus, r.adopt,
	} {
		err = phase(ctx, s)
		if err != nil {
			break
		}
	}
	if apierrors.IsConflict(err) || errors.Is(err, apply.ErrNotCached) {
		// Written meanwhile, or written by an earlier pass that the cache has not caught up with: read again soon.
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if err == nil && s.adoptLater {
		// Not at once: the owner write is locked to the add-on as the cache has it, which must have caught up with
		// this pass's status write first.
		return ctrl.Result{RequeueAfter: adoptAfter, Priority: ptr.To(handler.LowPriority)}, nil
	}
	return ctrl.Result{RequeueAfter: s.requeue}, err
}

// adoptAfter is how long after the pass that deployed a cluster's agent its add-on's owner is written, at the
// earliest.
const adoptAfter = time.Second

// adopt makes the ClusterManagementAddOn an owner of the add-on, those users created too, as OCM's addon-owner
// controller does for the add-ons OCM's addon-manager runs: deleting it ('helm uninstall', or the deletion of the
// configuration) then removes the add-on, its agent and its status from every cluster through the garbage
// collector. The owner is written by the add-on's own pass, locked to the add-on as the pass's status write left
// it, rather than by a second writer racing that write. It is bookkeeping: a pass that deployed the agent leaves it
// to a pass of low priority, which the queue serves once no cluster waits for its agent (on a hub installing
// 1,000 clusters, 1,000 owner writes among the deployments delayed the last agent by a quarter).
func (r *Reconciler) adopt(ctx context.Context, s *scope) error {
	cma := s.cma
	if cma == nil || slices.ContainsFunc(s.mca.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == cma.UID }) {
		return nil
	}
	if s.deployed {
		s.adoptLater = true
		if s.mcaRead != s.mca.ResourceVersion {
			r.wroteOver.Store(client.ObjectKeyFromObject(s.mca), s.mcaRead)
		}
		return nil
	}
	owned := s.mca.DeepCopy()
	owned.OwnerReferences = append(owned.OwnerReferences, addonconfig.CMAOwner(cma))
	if err := r.Client.Update(ctx, owned); err != nil {
		return fmt.Errorf("make ClusterManagementAddOn %s an owner of the add-on of cluster %s: %w", cma.Name, s.mca.Namespace, err)
	}
	s.mca = owned
	return nil
}

// reconcileWork renders and applies the agent ManifestWork. On bad input it reports the problem and leaves the
// last good work as it is.
func (r *Reconciler) reconcileWork(ctx context.Context, s *scope) error {
	if s.problem == nil {
		applied, err := r.renderAndApply(ctx, s)
		if err != nil || applied {
			return err
		}
	}
	// Not rendered in this pass: report the work as it is.
	work := &workv1.ManifestWork{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.mca.Namespace, Name: render.AgentWorkName}, work)
	if err == nil {
		s.work = work
	}
	return client.IgnoreNotFound(err)
}

// renderAndApply renders the agent work and ensures it, setting s.work to the live or created work; it returns
// whether it got that far.
func (r *Reconciler) renderAndApply(ctx context.Context, s *scope) (bool, error) {
	bundle := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: contract.Namespace(s.mpc), Name: proxyv1alpha1.CABundleSecretName}, bundle); err != nil {
		return false, client.IgnoreNotFound(err) // the configuration's own reconcile publishes it; its creation re-queues us
	}
	host, _ := render.SplitEntrypoint(s.mpc.Status.Entrypoint)
	mirrors, err := proxyenv.ClusterRegistries(s.cluster.Annotations)
	var work *workv1.ManifestWork
	var summary *render.AgentSummary
	if err == nil {
		work, summary, err = render.AgentWork(render.AgentInput{
			Cluster: s.mca.Namespace, MPC: s.mpc, ADC: s.adc, ClusterRegistries: mirrors,
			EntrypointHost: host, CABundle: bundle.Data["ca.crt"],
		})
	}
	var fieldErr *proxyenv.FieldError
	if errors.As(err, &fieldErr) {
		switch {
		case strings.HasPrefix(fieldErr.Field, proxyenv.ClusterRegistriesField):
			fieldErr.Message = fmt.Sprintf("ManagedCluster %s: %s", s.cluster.Name, fieldErr.Message)
		case s.adc != nil:
			fieldErr.Message = fmt.Sprintf("AddOnDeploymentConfig %s: %s", s.adcRef, fieldErr.Message)
		}
		s.problem = fieldErr
		return false, nil
	}
	if errors.Is(err, render.ErrEntrypointUnknown) {
		return false, nil // the configuration's status change re-queues us once it is known
	}
	if err != nil {
		return false, fmt.Errorf("render the agent of cluster %s: %w", s.mca.Namespace, err)
	}
	s.summary = summary
	work.OwnerReferences = []metav1.OwnerReference{ownerRef(s.mca)}
	s.work, s.deployed, err = apply.EnsureReplaced(ctx, r.Client, r.APIReader, work)
	return err == nil, err
}

// problemIsNew reports whether the add-on does not show this problem yet, so its Event is emitted once, not on
// every pass while it lasts.
func problemIsNew(mca *addonv1alpha1.ManagedClusterAddOn, problem *proxyenv.FieldError) bool {
	c := meta.FindStatusCondition(mca.Status.Conditions, addonv1alpha1.ManagedClusterAddOnConditionConfigured)
	return c == nil || c.Status != metav1.ConditionFalse || c.Reason != problem.Reason || c.Message != problem.Error()
}

// SetupWithManager registers the reconciler and the changes that re-queue a cluster. The add-on, its work and its
// ClusterProxyStatus pass only the changes a pass did not make itself (see the predicates): a pass's own writes
// would otherwise queue a second pass per cluster that only finds them in place.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	onlyOurAddOn := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == proxyv1alpha1.AddonName })
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Tunnels != nil {
		b = b.WatchesRawSource(source.Channel(r.Tunnels.Changes(), handler.TypedEnqueueRequestsFromMapFunc(r.addOnsOfTunnelChange)))
	}
	return b.
		For(&addonv1alpha1.ManagedClusterAddOn{}, builder.WithPredicates(onlyOurAddOn, addOnSpecChanged)).
		Owns(&workv1.ManifestWork{}, builder.WithPredicates(workChangedByOthers)).
		Owns(&proxyv1alpha1.ClusterProxyStatus{}, builder.WithPredicates(renderedChangedByOthers)).
		// As metadata: the spec (client configs and CA bundles) and the status the klusterlet keeps rewriting are most of
		// a cluster, and no pass reads them. The CSR approval's hubAcceptsClient goes to the API server.
		Watches(&clusterv1.ManagedCluster{}, handler.EnqueueRequestsFromMapFunc(addOnOfCluster), builder.OnlyMetadata,
			builder.WithPredicates(clusterInputChanged)).
		Watches(&certificatesv1.CertificateSigningRequest{}, handler.EnqueueRequestsFromMapFunc(addOnOfCSR)).
		Watches(&proxyv1alpha1.ManagedProxyConfiguration{}, handler.EnqueueRequestsFromMapFunc(r.allAddOns), builder.WithPredicates(agentInputChanged)).
		// The published CA bundle goes into every agent work.
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.allAddOns), builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetName() == proxyv1alpha1.CABundleSecretName
		}))).
		Watches(&addonv1alpha1.AddOnDeploymentConfig{}, handler.EnqueueRequestsFromMapFunc(r.addOnsOfADC)).
		Watches(&addonv1alpha1.ClusterManagementAddOn{}, handler.EnqueueRequestsFromMapFunc(r.allAddOns), builder.WithPredicates(onlyOurAddOn)).
		Named("clusteragent").
		WithOptions(opts).
		Complete(r)
}

// addOnSpecChanged passes a new add-on, a deleted one and a change of its spec. Not its status, which this
// reconciler writes, and of which OCM's agents write conditions it does not read.
var addOnSpecChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() ||
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	},
}

// renderedChangedByOthers passes the deletion of an object a pass renders, and a change of its spec that kept the
// rendered hash, i.e. made by another writer (a pass that renders something new writes a new hash). Not its
// creation, which a pass makes, nor a status write.
var renderedChangedByOthers = predicate.Funcs{
	CreateFunc: func(event.CreateEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() &&
			e.ObjectOld.GetAnnotations()[apply.HashAnnotation] == e.ObjectNew.GetAnnotations()[apply.HashAnnotation]
	},
}

// workChangedByOthers is renderedChangedByOthers for the agent ManifestWork, whose status the work agent writes
// from the managed cluster: every change of that status passes too.
var workChangedByOthers = predicate.Funcs{
	CreateFunc: renderedChangedByOthers.CreateFunc,
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*workv1.ManifestWork)
		cur, ok2 := e.ObjectNew.(*workv1.ManifestWork)
		return !ok1 || !ok2 || renderedChangedByOthers.UpdateFunc(e) || !equality.Semantic.DeepEqual(old.Status, cur.Status)
	},
}

// clusterInputChanged passes what a pass reads of a ManagedCluster: that it exists, that it is being deleted, and its
// image-registries annotation. Not the status the klusterlet keeps updating (conditions, capacity, claims).
var clusterInputChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		key := clusterv1.ClusterImageRegistriesAnnotationKey
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() ||
			e.ObjectOld.GetAnnotations()[key] != e.ObjectNew.GetAnnotations()[key]
	},
}

func addOnOfCluster(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetName(), Name: proxyv1alpha1.AddonName}}}
}

// agentInputChanged passes the ManagedProxyConfiguration changes the agents are rendered and registered from: its
// spec, its entrypoint and its signer. Not its conditions and cluster counts, which follow the clusters: a pass of
// every cluster each time a count changed would cost a large hub a pass per cluster every few seconds while agents
// connect.
var agentInputChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*proxyv1alpha1.ManagedProxyConfiguration)
		cur, ok2 := e.ObjectNew.(*proxyv1alpha1.ManagedProxyConfiguration)
		return !ok1 || !ok2 || old.Generation != cur.Generation || old.Status.Entrypoint != cur.Status.Entrypoint ||
			!equality.Semantic.DeepEqual(old.Status.Signer, cur.Status.Signer)
	},
}

func addOnOfCSR(_ context.Context, o client.Object) []reconcile.Request {
	cluster := o.GetLabels()[csrreview.ClusterNameLabel]
	if cluster == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: cluster, Name: proxyv1alpha1.AddonName}}}
}

// addOnsOfTunnelChange re-queues the add-on of a cluster whose tunnel changed, or every add-on.
func (r *Reconciler) addOnsOfTunnelChange(ctx context.Context, cluster string) []reconcile.Request {
	if cluster == tunnelhealth.AllClusters {
		return r.allAddOns(ctx, nil)
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: cluster, Name: proxyv1alpha1.AddonName}}}
}

func (r *Reconciler) allAddOns(ctx context.Context, _ client.Object) []reconcile.Request {
	// The cache holds only the add-ons named cluster-proxy.
	return index.Requests(ctx, r.Client, &addonv1alpha1.ManagedClusterAddOnList{})
}

// TrimCachedWork is the cache transform of ManifestWorks: it drops the rendered manifests, the bulk of a work, which
// the reconciler never reads (apply.EnsureReplaced compares the rendered hash), and the operator's own managed
// fields. At 1,000 clusters that is most of the manager's memory.
func TrimCachedWork(obj any) (any, error) {
	if work, ok := obj.(*workv1.ManifestWork); ok {
		work.Spec.Workload.Manifests = nil
	}
	return apply.KeepForeignManagedFields(obj)
}
