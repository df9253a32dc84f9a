// Package agentcsr approves the add-on's certificate signing requests from accepted clusters and signs the
// proxy-agent ones with the configuration's CA, so agent private keys never leave the managed cluster.
package agentcsr

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
)

// Reconciler approves the add-on's CSRs from accepted clusters and signs the proxy-agent ones with the
// configuration's CA, so agent private keys never leave the managed cluster. Anything else of the add-on is denied,
// with an Event saying why; CSRs of other signers and add-ons are left alone.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
}

// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=certificatesigningrequests/approval;certificatesigningrequests/status,verbs=update
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,resourceNames=open-cluster-management.io/proxy-agent-signer;kubernetes.io/kube-apiserver-client,verbs=approve
// +kubebuilder:rbac:groups=certificates.k8s.io,resources=signers,resourceNames=open-cluster-management.io/proxy-agent-signer,verbs=sign

// Reconcile reviews one CSR.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	csr := &certificatesv1.CertificateSigningRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, csr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	clusterName := csr.Labels[csrreview.ClusterNameLabel]
	if err := r.deleteSuperseded(ctx, csr); err != nil {
		return ctrl.Result{}, err
	}
	if failed(csr) || (approved(csr) && (len(csr.Status.Certificate) > 0 || csr.Spec.SignerName != csrreview.AgentSignerName)) {
		return ctrl.Result{}, nil // decided, and signed where the operator signs: nothing left to do
	}
	// Approval is a security decision: the cluster's acceptance is read from the API server, not the cache, so a
	// revocation made a moment ago is seen. CSRs are few.
	cluster := &clusterv1.ManagedCluster{}
	accepted := false
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: clusterName}, cluster); err == nil {
		accepted = cluster.Spec.HubAcceptsClient
	} else if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	expected := csrreview.Expected{Cluster: clusterName}
	if csr.Spec.SignerName == csrreview.AgentSignerName && clusterName != "" {
		var err error
		if expected.Subject, err = r.advertisedSubject(ctx, clusterName); err != nil {
			return ctrl.Result{}, err
		}
	}

	if approved(csr) {
		// Approved earlier (by this operator before a failed signing, or by a person): sign only what the review
		// would approve now.
		undecided := csr.DeepCopy()
		undecided.Status.Conditions = nil
		if res := csrreview.Review(undecided, accepted, expected); res.Decision != csrreview.Approve || !res.Sign {
			return ctrl.Result{}, nil
		}
		return r.sign(ctx, csr)
	}
	result := csrreview.Review(csr, accepted, expected)
	switch result.Decision {
	case csrreview.Approve:
		if err := r.decide(ctx, csr, certificatesv1.CertificateApproved, result, clusterName); err != nil {
			return ctrl.Result{}, err
		}
		return r.sign(ctx, csr)
	case csrreview.Deny:
		return ctrl.Result{}, r.decide(ctx, csr, certificatesv1.CertificateDenied, result, clusterName)
	}
	return ctrl.Result{}, nil
}

// advertisedSubject is the agent certificate subject the operator advertises for cluster, empty while none is. The
// add-on's status names the agent namespace the registration asked for, in the same write; that write is the
// operator's own, and the klusterlet may ask for the certificate before the cache has seen it. So the add-on is read
// from the API server: a denial is final, the klusterlet does not ask again.
func (r *Reconciler) advertisedSubject(ctx context.Context, cluster string) (csrreview.Subject, error) {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: proxyv1alpha1.DefaultConfigurationName}, mpc); err != nil || mpc.Status.Signer == nil {
		return csrreview.Subject{}, client.IgnoreNotFound(err)
	}
	mca := &addonv1alpha1.ManagedClusterAddOn{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cluster, Name: proxyv1alpha1.AddonName}, mca); err != nil || mca.Status.Namespace == "" {
		return csrreview.Subject{}, client.IgnoreNotFound(err)
	}
	return csrreview.Subject(contract.AgentCertificateSubject(cluster, mca.Status.Namespace, mpc.Status.Signer.CAFingerprint)), nil
}

// decide records the approval or denial on the CSR and says so in an Event.
func (r *Reconciler) decide(ctx context.Context, csr *certificatesv1.CertificateSigningRequest, decision certificatesv1.RequestConditionType, result csrreview.Result, cluster string) error {
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: decision, Status: corev1.ConditionTrue, Reason: result.Reason, Message: result.Message, LastUpdateTime: metav1.Now(),
	})
	if err := r.Client.SubResource("approval").Update(ctx, csr); err != nil {
		return err
	}
	csrDecisions.WithLabelValues(string(decision), result.Reason).Inc()
	eventType, action := corev1.EventTypeNormal, "Approve"
	if decision == certificatesv1.CertificateDenied {
		eventType, action = corev1.EventTypeWarning, "Deny"
	}
	r.Recorder.Eventf(csr, nil, eventType, result.Reason, action, "%s CSR %s of cluster %s: %s", decision, csr.Name, cluster, result.Message)
	return nil
}

// The manager serves controller-runtime's registry. Both labels are the operator's own constants.
var (
	csrDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_proxy_agent_csr_decisions_total",
		Help: "CSRs of the add-on the operator approved or denied, by decision (Approved, Denied) and reason.",
	}, []string{"decision", "reason"})
	csrsSigned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_proxy_agent_csrs_signed_total",
		Help: "Proxy-agent CSRs the operator signed with the configuration's CA.",
	})
)

func init() {
	metrics.Registry.MustRegister(csrDecisions, csrsSigned)
}

// signerRetry is how soon an approved CSR is signed again when the signer was not ready.
const signerRetry = 10 * time.Second

// sign issues the certificate of an approved proxy-agent CSR that has none yet. While the signer is not ready
// (the configuration reports why), it tries again shortly: nothing else re-queues the CSR.
func (r *Reconciler) sign(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) (ctrl.Result, error) {
	if csr.Spec.SignerName != csrreview.AgentSignerName || len(csr.Status.Certificate) > 0 || failed(csr) {
		return ctrl.Result{}, nil
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: proxyv1alpha1.DefaultConfigurationName}, mpc); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: signerRetry}, nil
		}
		return ctrl.Result{}, err
	}
	sgn, err := signer.Load(ctx, r.Client, mpc)
	var notReady *signer.NotReadyError
	if errors.As(err, &notReady) {
		return ctrl.Result{RequeueAfter: signerRetry}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	duration := certs.DefaultLeafDuration // unless the CSR asks for a shorter one
	if s := csr.Spec.ExpirationSeconds; s != nil && time.Duration(*s)*time.Second < duration {
		duration = max(time.Duration(*s)*time.Second, time.Hour)
	}
	chain, err := certs.SignCSR(sgn.CA, csr.Spec.Request, duration, sgn.Intermediates, r.Clock.Now())
	if err != nil {
		return ctrl.Result{}, err
	}
	csr.Status.Certificate = chain
	if err := r.Client.Status().Update(ctx, csr); err != nil {
		return ctrl.Result{}, err
	}
	csrsSigned.Inc()
	r.Recorder.Eventf(csr, nil, corev1.EventTypeNormal, "Signed", "Sign", "Signed CSR %s of cluster %s with CA %s",
		csr.Name, csr.Labels[csrreview.ClusterNameLabel], certs.Fingerprint(sgn.CA.Cert))
	return ctrl.Result{}, nil
}

// deleteSuperseded deletes the finished CSRs (issued, denied or failed) of csr's cluster, add-on and signer that a
// later one of them supersedes: the klusterlet asks again only once it is done with its last request. OCM's
// klusterlet stops asking for certificates of an add-on while 10 of its CSRs are on the hub, and the hub keeps an
// issued CSR an hour; without this, a few CA rotations within the hour leave the agents without a certificate.
func (r *Reconciler) deleteSuperseded(ctx context.Context, csr *certificatesv1.CertificateSigningRequest) error {
	cluster := csr.Labels[csrreview.ClusterNameLabel]
	if cluster == "" {
		return nil
	}
	list := &certificatesv1.CertificateSigningRequestList{}
	if err := r.Client.List(ctx, list, client.MatchingLabels{csrreview.ClusterNameLabel: cluster, csrreview.AddonNameLabel: proxyv1alpha1.AddonName}); err != nil {
		return err
	}
	var latest metav1.Time
	for i := range list.Items {
		if c := &list.Items[i]; c.Spec.SignerName == csr.Spec.SignerName && latest.Before(&c.CreationTimestamp) {
			latest = c.CreationTimestamp
		}
	}
	for i := range list.Items {
		// Only one created in an earlier second than the latest: creation times have seconds, and two in one second
		// cannot be told apart, so both stay until a later one supersedes them.
		c := &list.Items[i]
		if c.Spec.SignerName != csr.Spec.SignerName || !c.CreationTimestamp.Before(&latest) || !finished(c) {
			continue
		}
		if err := r.Client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete superseded CSR %s: %w", c.Name, err)
		}
		log.FromContext(ctx).V(1).Info("Deleted a superseded CSR", "csr", c.Name, "cluster", cluster)
	}
	return nil
}

// finished says whether nothing more happens to csr: denied, failed, or approved with its certificate issued.
func finished(csr *certificatesv1.CertificateSigningRequest) bool {
	return failed(csr) || (approved(csr) && len(csr.Status.Certificate) > 0)
}

func approved(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func failed(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if (c.Type == certificatesv1.CertificateFailed || c.Type == certificatesv1.CertificateDenied) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// SetupWithManager registers the reconciler for the add-on's CSRs.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&certificatesv1.CertificateSigningRequest{}).
		Named("agentcsr").
		WithOptions(opts).
		Complete(r)
}
