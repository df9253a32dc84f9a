// Package proxycertificate issues ProxyCertificates into kubernetes.io/tls secrets and renews them. The work is
// split as cert-manager splits it: trigger.go decides whether and why to issue, issuing.go signs and writes the
// secret, readiness.go reports the result.
package proxycertificate

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/extendedspec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/namespaces"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
)

// conflictRetry is how soon a pass that lost an optimistic-lock race runs again.
const conflictRetry = 100 * time.Millisecond

// Reconciler issues and renews ProxyCertificates.
type Reconciler struct {
	Client client.Client
	// APIReader reads the Secret again, past the cache, before a certificate is issued: a pass that follows its own
	// issuance (woken by its status write) may find the cache still holding the certificate it replaced, and would
	// issue twice. Nil reads through Client.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// Namespaces are the namespaces certificates may be issued into (the manager's Role for Secrets is granted there);
	// the zero Set is every namespace.
	Namespaces namespaces.Set
}

// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=proxycertificates,verbs=get;list;watch
// +kubebuilder:rbac:groups=proxy.open-cluster-management.io,resources=proxycertificates/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",namespace=system,resources=secrets,verbs=get;list;watch;create;update;patch;delete

// Reconcile issues the certificate when it is missing, due for renewal or no longer matches its spec or CA.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pc := &proxyv1alpha1.ProxyCertificate{}
	if err := r.Client.Get(ctx, req.NamespacedName, pc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pc.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	status := pc.Status.DeepCopy()
	now := r.Clock.Now()

	result, err := r.reconcile(ctx, pc, status, now)
	perr := r.patchStatus(ctx, pc, status)
	if apierrors.IsConflict(perr) && err == nil {
		// Someone else (often the issuer's own update) wrote meanwhile: read again soon, no error to report.
		return ctrl.Result{RequeueAfter: conflictRetry}, nil
	}
	if perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	return result, err
}

func (r *Reconciler) reconcile(ctx context.Context, pc *proxyv1alpha1.ProxyCertificate, status *proxyv1alpha1.ProxyCertificateStatus, now time.Time) (ctrl.Result, error) {
	if !r.Namespaces.Has(pc.Namespace) {
		// A key issued where the manager was not asked to write could land where anyone who may create a
		// ProxyCertificate there reads it: nothing is issued, nothing is read.
		setNotReady(status, pc, proxyv1alpha1.ReasonNamespaceNotManaged, fmt.Sprintf("namespace %q is not one certificates "+
			"are issued into (the manager's --proxy-certificate-namespaces and --proxy-server-namespaces: %s): create the "+
			"ProxyCertificate in one of those, or have the manager's namespaces extended", pc.Namespace, r.Namespaces))
		return ctrl.Result{}, nil
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: pc.Spec.IssuerRef.Name}, mpc); err != nil {
		if apierrors.IsNotFound(err) {
			setNotReady(status, pc, proxyv1alpha1.ReasonIssuerNotFound, "ManagedProxyConfiguration "+pc.Spec.IssuerRef.Name+" not found: fix spec.issuerRef.name")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	extendedspec.Restore(mpc)
	sgn, err := signer.Load(ctx, r.Client, mpc)
	var notReady *signer.NotReadyError
	if errors.As(err, &notReady) {
		setNotReady(status, pc, proxyv1alpha1.ReasonIssuerNotReady, notReady.Message)
		return ctrl.Result{}, nil // the issuer's status changes when it becomes ready, which re-queues this
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	secret := &corev1.Secret{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pc.Namespace, Name: pc.Spec.SecretName}, secret); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	if err := reservedName(pc, mpc); err != nil {
		setNotReady(status, pc, proxyv1alpha1.ReasonReservedCommonName, err.Error())
		return ctrl.Result{}, nil
	}
	spec, err := leafSpec(pc, operatorRole(pc, mpc))
	if err != nil {
		setNotReady(status, pc, proxyv1alpha1.ReasonIssueFailed, err.Error())
		return ctrl.Result{}, nil
	}
	reason, leaf := needsIssue(secret, pc, spec, sgn, now)
	if reason != "" && r.APIReader != nil {
		live := &corev1.Secret{}
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: pc.Namespace, Name: pc.Spec.SecretName}, live); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
		secret = live
		reason, leaf = needsIssue(secret, pc, spec, sgn, now)
	}
	if reason != "" {
		setIssuing(status, pc, string(reason))
		leaf, err = r.issue(ctx, pc, spec, sgn, reason, now)
		if err != nil {
			setNotReady(status, pc, proxyv1alpha1.ReasonIssueFailed, err.Error())
			return ctrl.Result{}, err
		}
	} else if err := r.ensureBundle(ctx, pc, secret, sgn); err != nil {
		return ctrl.Result{}, err
	}
	renewal := setReady(status, pc, leaf, sgn)
	return ctrl.Result{RequeueAfter: max(renewal.Sub(now), time.Second)}, nil
}

func (r *Reconciler) patchStatus(ctx context.Context, pc *proxyv1alpha1.ProxyCertificate, status *proxyv1alpha1.ProxyCertificateStatus) error {
	before := pc.DeepCopy()
	pc.Status = *status
	return apply.UpdateStatus(ctx, r.Client, before, pc)
}

// SetupWithManager registers the reconciler; a change of an issuer re-queues its certificates.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		// Every update, its own status writes included: a pass that read a stale cached status and found nothing
		// to write must be followed by one that sees the status it raced with.
		For(&proxyv1alpha1.ProxyCertificate{}).
		Owns(&corev1.Secret{}).
		Watches(&proxyv1alpha1.ManagedProxyConfiguration{}, handler.EnqueueRequestsFromMapFunc(r.certificatesOfIssuer)).
		Named("proxycertificate").
		WithOptions(opts).
		Complete(r)
}

func (r *Reconciler) certificatesOfIssuer(ctx context.Context, obj client.Object) []reconcile.Request {
	return index.Requests(ctx, r.Client, &proxyv1alpha1.ProxyCertificateList{}, client.MatchingFields{index.IssuerName: obj.GetName()})
}
