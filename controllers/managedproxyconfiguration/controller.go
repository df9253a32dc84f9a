// Package managedproxyconfiguration reconciles a ManagedProxyConfiguration into the hub side of the proxy: the
// proxy-server namespace, ServiceAccount, RBAC, Services, Deployment, the signer CA and its published bundle, the
// hub ProxyCertificates and the ClusterManagementAddOn. Its cluster counts are package clustercount's.
package managedproxyconfiguration

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/extendedspec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/namespaces"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
)

// Reconciler reconciles ManagedProxyConfigurations.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache does not hold: a user-provided signer secret.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// RolloverGrace is how long the previous CA stays in the bundle once every certificate it signed was re-issued
	// (CARolloverGrace when zero): longer than the kubelets take to update the pods' Secret volumes.
	RolloverGrace time.Duration
	// OCMTLSProfile, when set, holds OCM's ocm-tls-profile ConfigMap of OCMTLSProfileNamespace: the TLS profile of
	// configurations without spec.tlsProfile.
	OCMTLSProfile          cache.Cache
	OCMTLSProfileNamespace string
	// Namespaces are the namespaces the manager may deploy proxy-servers in (its Role is granted there); the zero
	// Set is every namespace.
	Namespaces namespaces.Set
	// Records, when set, reports the default configuration's proxy-servers' record sinks (RecordsWritable);
	// RecordChanges tells when they changed.
	Records       RecordSource
	RecordChanges <-chan event.TypedGenericEvent[string]

	// swept is set once a pass found none of the existing add-on's leftovers (sweepAddOnLeftovers).
	swept atomic.Bool
}

// scope is everything one pass reads and decides.
type scope struct {
	mpc       *proxyv1alpha1.ManagedProxyConfiguration
	status    *proxyv1alpha1.ManagedProxyConfigurationStatus
	ca        *certs.KeyPair // nil when the signer is not usable
	entryHost string         // "" while unknown
	bundle    []byte         // the published CA bundle (PEM), once the signer is ready
	// adoptedClients are the existing add-on's proxy-client certificates (hex SHA-256) the proxy-servers let reach
	// every cluster (adoptedProxyClientsAnnotation).
	adoptedClients []string
}

type phase func(context.Context, *scope) (ctrl.Result, error)

// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=managedproxyconfigurations,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=managedproxyconfigurations/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=proxycertificates,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apps,namespace=system,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,namespace=system,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",namespace=system,resources=configmaps,verbs=get;list;watch;create;update;patch;delete
// The proxy-servers read the front proxy's CA by name (render.ServerHubRBAC); the manager grants only what it holds.
// +kubebuilder:rbac:groups="",resources=configmaps,resourceNames=extension-apiserver-authentication,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,namespace=system,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,namespace=system,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=get;list;watch;create;update;patch;delete
// The gateway's one APIService, by name (the cache lists it by that name).
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=create
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,resourceNames=v1alpha1.gateway.proxy.open-cluster-management.io,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,resourceNames=system:auth-delegator,verbs=bind
// The existing add-on's proxy-server pods, deleted at once when their Deployment is replaced.
// +kubebuilder:rbac:groups="",namespace=system,resources=pods,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",namespace=system,resources=pods/portforward,verbs=create
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=clustermanagementaddons,verbs=create
// +kubebuilder:rbac:groups=addon.open-cluster-management.io,resources=clustermanagementaddons,resourceNames=cluster-proxy,verbs=get;list;watch;update;patch;delete

// Reconcile brings the hub objects of one ManagedProxyConfiguration in line with its spec.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, req.NamespacedName, mpc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !mpc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references let the garbage collector remove what it owned
	}
	stored := mpc.DeepCopy()
	dropped := extendedspec.Restore(mpc)
	s := &scope{mpc: mpc, status: mpc.Status.DeepCopy()}
	if err := r.reconcileExtendedSettings(ctx, s, stored, dropped); err != nil {
		return ctrl.Result{}, err
	}
	if msg := r.outsideNamespaces(mpc); msg != "" {
		// Nothing is written: the manager has no rights there, and a forbidden request retried would say less.
		if c := meta.FindStatusCondition(s.status.Conditions, proxyv1alpha1.ConditionReady); c == nil || c.Reason != proxyv1alpha1.ReasonNamespaceNotManaged {
			r.Recorder.Eventf(mpc, nil, corev1.EventTypeWarning, proxyv1alpha1.ReasonNamespaceNotManaged, "Reconcile", "%s", msg)
		}
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionReady, false, proxyv1alpha1.ReasonNamespaceNotManaged, msg)
		return ctrl.Result{}, r.patchStatus(ctx, mpc, s.status)
	}

	phases := []phase{r.reconcileNamespace, r.reconcileSigner, r.reconcileEntrypoint, r.reconcileCertificates,
		r.reconcileTLSProfile, r.reconcileServer, r.reconcileAddOn, r.reconcileRecords}
	var result ctrl.Result
	var errs []error
	for _, p := range phases {
		res, err := p(ctx, s)
		if err != nil {
			errs = append(errs, err)
		}
		result = lowestRequeue(result, res)
	}
	err := kerrors.NewAggregate(errs)
	setReadyCondition(s.status, mpc.Generation)
	if err == nil {
		s.status.ObservedGeneration = mpc.Generation
		s.status.LastObservedGeneration = mpc.Generation
	}
	perr := r.patchStatus(ctx, mpc, s.status)
	if apierrors.IsConflict(perr) && err == nil {
		// The configuration changed meanwhile: read it again soon, no error to report.
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if perr != nil {
		err = kerrors.NewAggregate([]error{err, perr})
	}
	return result, err
}

// outsideNamespaces says which namespace of mpc's spec the manager does not manage, "" when it manages them all.
func (r *Reconciler) outsideNamespaces(mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	outside := func(field, ns string) string {
		return fmt.Sprintf("%s is %q, a namespace this manager does not manage (its --proxy-server-namespaces are %s): "+
			"use one of those, or add it to the manager's namespaces and grant the manager's Role in it", field, ns, r.Namespaces)
	}
	if ns := contract.Namespace(mpc); !r.Namespaces.Has(ns) {
		return outside("spec.proxyServer.namespace", ns)
	}
	if key, ok := signer.ProvidedSecretKey(mpc); ok && !r.Namespaces.Has(key.Namespace) {
		return outside("spec.authentication.signer.provided.secretRef.namespace", key.Namespace)
	}
	return ""
}

// reconcileExtendedSettings records the settings beyond the existing add-on's API in the configuration's annotation,
// or, when an update dropped them all (dropped, which Restore has put back into s.mpc), keeps the record and says so.
func (r *Reconciler) reconcileExtendedSettings(ctx context.Context, s *scope, stored *proxyv1alpha1.ManagedProxyConfiguration, dropped []string) error {
	gen := s.mpc.Generation
	if len(dropped) > 0 {
		msg := fmt.Sprintf("an update removed every setting the existing add-on's API lacks (%s), as a client built on "+
			"that API's types does; the last good values stay in use. Set them again, or, to remove them, also remove "+
			"the annotation %s", strings.Join(dropped, ", "), extendedspec.Annotation)
		if c := meta.FindStatusCondition(s.status.Conditions, proxyv1alpha1.ConditionExtendedSettingsApplied); c == nil || c.Status != metav1.ConditionFalse {
			r.Recorder.Eventf(s.mpc, nil, corev1.EventTypeWarning, proxyv1alpha1.ReasonDroppedByUpdate, "Reconcile", "%s", msg)
		}
		setCondition(s.status, gen, proxyv1alpha1.ConditionExtendedSettingsApplied, false, proxyv1alpha1.ReasonDroppedByUpdate, msg)
		return nil
	}
	setCondition(s.status, gen, proxyv1alpha1.ConditionExtendedSettingsApplied, true, proxyv1alpha1.ReasonAsSpecified,
		"the spec's settings apply as written")
	want := extendedspec.Record(stored)
	if stored.Annotations[extendedspec.Annotation] == want {
		return nil
	}
	recorded := stored.DeepCopy()
	if want == "" {
		delete(recorded.Annotations, extendedspec.Annotation)
	} else {
		if recorded.Annotations == nil {
			recorded.Annotations = map[string]string{}
		}
		recorded.Annotations[extendedspec.Annotation] = want
	}
	return r.Client.Patch(ctx, recorded, client.MergeFrom(stored))
}

func (r *Reconciler) patchStatus(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, status *proxyv1alpha1.ManagedProxyConfigurationStatus) error {
	before := mpc.DeepCopy()
	mpc.Status = *status
	return apply.UpdateStatus(ctx, r.Client, before, mpc)
}

func lowestRequeue(a, b ctrl.Result) ctrl.Result {
	if b.RequeueAfter > 0 && (a.RequeueAfter == 0 || b.RequeueAfter < a.RequeueAfter) {
		a.RequeueAfter = b.RequeueAfter
	}
	return a
}

func setCondition(status *proxyv1alpha1.ManagedProxyConfigurationStatus, generation int64, conditionType string, ok bool, reason, message string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: conditionType, Status: s, Reason: reason, Message: message, ObservedGeneration: generation})
}

func toDefaultConfiguration(context.Context, client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: proxyv1alpha1.DefaultConfigurationName}}}
}

// agentIssuerChanged passes only the ClusterProxyStatus events that change which CAs agents hold certificates of;
// a new cluster's status, created before its agent has a certificate, is not one.
var agentIssuerChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool {
		return e.Object.(*proxyv1alpha1.ClusterProxyStatus).Status.AgentCertificateAuthorityKeyID != ""
	},
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.(*proxyv1alpha1.ClusterProxyStatus).Status.AgentCertificateAuthorityKeyID !=
			e.ObjectNew.(*proxyv1alpha1.ClusterProxyStatus).Status.AgentCertificateAuthorityKeyID
	},
	DeleteFunc: func(e event.DeleteEvent) bool {
		cps, ok := e.Object.(*proxyv1alpha1.ClusterProxyStatus)
		return !ok || cps.Status.AgentCertificateAuthorityKeyID != ""
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// toConfigurationOfPod is a request for the configuration whose proxy-server the pod is.
func toConfigurationOfPod(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[render.ConfigurationLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
}

// toConfigurationOfSigner is a request for the configuration whose CA a signer secret holds: that secret has no owner
// reference (it outlives the configuration), so Owns does not map it, yet a deleted or restored CA must be acted on.
func toConfigurationOfSigner(_ context.Context, o client.Object) []reconcile.Request {
	name := o.GetLabels()[render.ConfigurationLabel]
	if o.GetName() != proxyv1alpha1.SignerSecretName || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
}

// podComesOrGoes passes a pod's creation and deletion (predicate.Funcs passes what it leaves unset), not its updates:
// its name, what the configuration reads, never changes.
var podComesOrGoes = predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }}

// toIssuer is a request for the configuration that issues a ProxyCertificate: one a user created, which the
// configuration does not own, holds its CA in the bundle too.
func toIssuer(_ context.Context, o client.Object) []reconcile.Request {
	pc, ok := o.(*proxyv1alpha1.ProxyCertificate)
	if !ok || pc.Spec.IssuerRef.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: pc.Spec.IssuerRef.Name}}}
}

// issuingCAChanged passes only the ProxyCertificate events that change which CA signed a live certificate.
var issuingCAChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool {
		return e.Object.(*proxyv1alpha1.ProxyCertificate).Status.IssuerFingerprint != ""
	},
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.(*proxyv1alpha1.ProxyCertificate).Status.IssuerFingerprint !=
			e.ObjectNew.(*proxyv1alpha1.ProxyCertificate).Status.IssuerFingerprint
	},
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

// allConfigurations are a request for every ManagedProxyConfiguration.
func (r *Reconciler) allConfigurations(ctx context.Context) []reconcile.Request {
	return index.Requests(ctx, r.Client, &proxyv1alpha1.ManagedProxyConfigurationList{})
}

// SetupWithManager registers the reconciler.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	b := ctrl.NewControllerManagedBy(mgr)
	if r.RecordChanges != nil {
		b = b.WatchesRawSource(source.Channel(r.RecordChanges, handler.TypedEnqueueRequestsFromMapFunc(
			func(_ context.Context, name string) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
			})))
	}
	if r.OCMTLSProfile != nil {
		// OCM's profile applies to every configuration without its own.
		b = b.WatchesRawSource(source.Kind(r.OCMTLSProfile, &corev1.ConfigMap{},
			handler.TypedEnqueueRequestsFromMapFunc(func(ctx context.Context, _ *corev1.ConfigMap) []reconcile.Request {
				return r.allConfigurations(ctx)
			})))
	}
	return b.
		// Every update, its own status writes included: a pass that read a stale cached status and found nothing
		// to write must be followed by one that sees the status it raced with.
		For(&proxyv1alpha1.ManagedProxyConfiguration{}).
		Owns(&appsv1.Deployment{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&rbacv1.ClusterRoleBinding{}).
		Owns(&proxyv1alpha1.ProxyCertificate{}).
		Owns(&addonv1alpha1.ClusterManagementAddOn{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(toConfigurationOfSigner)).
		// An earlier CA stays in the bundle while a certificate it signed is live, the users' own included.
		Watches(&proxyv1alpha1.ProxyCertificate{}, handler.EnqueueRequestsFromMapFunc(toIssuer),
			builder.WithPredicates(issuingCAChanged)).
		// The agents may port-forward to the proxy-server pods by name: a pod that comes or goes changes the names.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(toConfigurationOfPod), builder.WithPredicates(podComesOrGoes)).
		// The default configuration's CA stays in the bundle while agents hold certificates it signed.
		Watches(&proxyv1alpha1.ClusterProxyStatus{}, handler.EnqueueRequestsFromMapFunc(toDefaultConfiguration),
			builder.WithPredicates(agentIssuerChanged)).
		Named("managedproxyconfiguration").
		WithOptions(opts).
		Complete(r)
}
