package proxycertificate

import (
	"crypto/x509"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
)

// setReady records the issued certificate and returns its renewal time.
func setReady(status *proxyv1alpha1.ProxyCertificateStatus, pc *proxyv1alpha1.ProxyCertificate, leaf *x509.Certificate, sgn *signer.Signer) time.Time {
	renewal := certs.RenewalTime(leaf.NotBefore, leaf.NotAfter, renewBefore(pc))
	status.NotBefore = &metav1.Time{Time: leaf.NotBefore}
	status.NotAfter = &metav1.Time{Time: leaf.NotAfter}
	status.RenewalTime = &metav1.Time{Time: renewal}
	status.SerialNumber = leaf.SerialNumber.Text(16)
	status.IssuerFingerprint = certs.Fingerprint(sgn.CA.Cert)
	status.ObservedGeneration = pc.Generation
	set(status, pc, proxyv1alpha1.ConditionReady, metav1.ConditionTrue, proxyv1alpha1.ReasonCertificateIssued,
		fmt.Sprintf("certificate is valid until %s and will be renewed at %s", leaf.NotAfter.UTC().Format(time.RFC3339), renewal.UTC().Format(time.RFC3339)))
	set(status, pc, proxyv1alpha1.ConditionIssuing, metav1.ConditionFalse, proxyv1alpha1.ReasonUpToDate, "certificate matches its spec and issuer")
	return renewal
}

// setNotReady reports why the certificate cannot be issued; an issued secret stays in place.
func setNotReady(status *proxyv1alpha1.ProxyCertificateStatus, pc *proxyv1alpha1.ProxyCertificate, reason, message string) {
	set(status, pc, proxyv1alpha1.ConditionReady, metav1.ConditionFalse, reason, message)
}

// setIssuing says a new certificate is being issued and why; it stays True if issuing fails.
func setIssuing(status *proxyv1alpha1.ProxyCertificateStatus, pc *proxyv1alpha1.ProxyCertificate, reason string) {
	set(status, pc, proxyv1alpha1.ConditionIssuing, metav1.ConditionTrue, reason, "issuing a new certificate: "+reason)
}

func set(status *proxyv1alpha1.ProxyCertificateStatus, pc *proxyv1alpha1.ProxyCertificate, conditionType string, s metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: conditionType, Status: s, Reason: reason, Message: message, ObservedGeneration: pc.Generation})
}
