package proxycertificate

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"crypto/x509"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
)

// leafSpec turns the ProxyCertificate spec into what the certificate must contain. Its URI SAN says what the
// certificate is: role, when set, the operator's role it is issued for (operatorRole); otherwise a client certificate
// names its ProxyCertificate (contract.CertificateURI), which the frontends authorize through the hub's RBAC.
func leafSpec(pc *proxyv1alpha1.ProxyCertificate, role string) (certs.LeafSpec, error) {
	spec := certs.LeafSpec{CommonName: pc.Spec.CommonName, DNSNames: pc.Spec.DNSNames, Duration: duration(pc)}
	if pc.Spec.Subject != nil {
		spec.Organizations = pc.Spec.Subject.Organizations
	}
	for _, s := range pc.Spec.IPAddresses {
		ip := net.ParseIP(s)
		if ip == nil {
			return spec, fmt.Errorf("spec.ipAddresses: %q is not an IP address", s)
		}
		spec.IPAddresses = append(spec.IPAddresses, ip)
	}
	for _, u := range pc.Spec.Usages {
		spec.Usages = append(spec.Usages, certs.Usage(u))
	}
	if len(spec.Usages) == 0 {
		// As the schema's default: a certificate that serves TLS says so.
		spec.Usages = []certs.Usage{certs.UsageClientAuth}
	}
	switch {
	case role != "":
		spec.URIs = []*url.URL{contract.SANURL(role)}
	case slices.Contains(spec.Usages, certs.UsageClientAuth):
		spec.URIs = []*url.URL{contract.SANURL(contract.CertificateURI(pc.Namespace, pc.Name))}
	}
	return spec, nil
}

// reservedName refuses a common name that carries more than a proxy client's rights (the impersonator's, an agent's)
// unless pc is the issuer's own certificate of that name: the one its configuration renders, in the proxy-server
// namespace, controlled by the issuer. Anyone allowed to create ProxyCertificates could otherwise act as any hub user
// on every managed cluster, or as any cluster's agent.
func reservedName(pc *proxyv1alpha1.ProxyCertificate, mpc *proxyv1alpha1.ManagedProxyConfiguration) error {
	if !contract.ReservedCommonName(pc.Spec.CommonName) {
		return nil
	}
	if pc.Spec.CommonName == contract.ImpersonatorCommonName && operatorRole(pc, mpc) == contract.ImpersonatorRoleURI {
		return nil
	}
	if issuersOwn(pc, mpc, proxyv1alpha1.ImpersonatorSecretName) && pc.Spec.SecretName != proxyv1alpha1.ImpersonatorSecretName {
		return fmt.Errorf("spec.secretName: the impersonator certificate is issued only into Secret %s, not %q",
			proxyv1alpha1.ImpersonatorSecretName, pc.Spec.SecretName)
	}
	return fmt.Errorf("spec.commonName: %q is reserved for the operator's own certificates; choose another name", pc.Spec.CommonName)
}

// operatorRole is the role URI a certificate is issued with: the impersonator's or the proxy-client's, only for the
// one ProxyCertificate the issuer renders for that role, issued into the Secret of that name; "" for every other.
// A writer of ProxyCertificates who renames the Secret of the issuer's own certificate gets, at most, a certificate
// without the role, in the Secret they chose.
func operatorRole(pc *proxyv1alpha1.ProxyCertificate, mpc *proxyv1alpha1.ManagedProxyConfiguration) string {
	for role, name := range map[string]string{
		contract.ImpersonatorRoleURI: proxyv1alpha1.ImpersonatorSecretName,
		contract.ProxyClientRoleURI:  contract.SecretNamesOf(mpc).ProxyClient,
	} {
		if issuersOwn(pc, mpc, name) && pc.Spec.SecretName == name {
			return role
		}
	}
	return ""
}

// issuersOwn reports whether pc is the certificate named name that mpc renders: in the proxy-server namespace and
// controlled by mpc.
func issuersOwn(pc *proxyv1alpha1.ProxyCertificate, mpc *proxyv1alpha1.ManagedProxyConfiguration, name string) bool {
	owner := metav1.GetControllerOf(pc)
	return pc.Namespace == contract.Namespace(mpc) && pc.Name == name &&
		owner != nil && owner.UID == mpc.UID && owner.Kind == "ManagedProxyConfiguration"
}

func duration(pc *proxyv1alpha1.ProxyCertificate) time.Duration {
	if pc.Spec.Duration != nil && pc.Spec.Duration.Duration > 0 {
		return pc.Spec.Duration.Duration
	}
	return certs.DefaultLeafDuration
}

func renewBefore(pc *proxyv1alpha1.ProxyCertificate) time.Duration {
	if pc.Spec.RenewBefore != nil {
		return pc.Spec.RenewBefore.Duration
	}
	return 0
}

// needsIssue decides whether the secret's certificate must be (re)issued, and why. It returns the current leaf
// when it is fine.
func needsIssue(secret *corev1.Secret, pc *proxyv1alpha1.ProxyCertificate, spec certs.LeafSpec, sgn *signer.Signer, now time.Time) (certs.IssueReason, *x509.Certificate) {
	if secret.Type != "" && secret.Type != corev1.SecretTypeTLS {
		return certs.ReasonMissing, nil
	}
	return certs.NeedsIssue(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey], spec, renewBefore(pc), sgn.CA.Cert, now)
}
