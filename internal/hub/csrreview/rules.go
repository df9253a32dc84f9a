package csrreview

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"slices"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

// denial is a failed check: the Deny reason and a message naming the field
// and what was expected.
type denial struct {
	reason  string
	message string
}

func deny(reason, format string, args ...any) *denial {
	return &denial{reason: reason, message: fmt.Sprintf(format, args...)}
}

// minRSABits is the smallest RSA modulus accepted.
const minRSABits = 2048

// Identities OCM gives a managed cluster and its add-ons on the hub.
func clusterUserPrefix(cluster string) string {
	return "system:open-cluster-management:" + cluster + ":"
}

func clusterGroup(cluster string) string {
	return "system:open-cluster-management:" + cluster
}

func addonGroup(cluster string) string {
	return "system:open-cluster-management:cluster:" + cluster + ":addon:" + AddonName
}

func addonAgentUserPrefix(cluster string) string {
	return addonGroup(cluster) + ":agent:"
}

// AllAgentsGroup is the hub group every cluster's add-on identity also carries, so one ClusterRoleBinding can grant
// all agents what they need on the hub (TokenReview) without a write per cluster.
const AllAgentsGroup = "system:open-cluster-management:addon:" + AddonName

// HubKubeconfigUser is the user the operator advertises for a cluster's add-on hub kubeconfig.
func HubKubeconfigUser(cluster string) string { return addonAgentUserPrefix(cluster) + "proxy-agent" }

// HubKubeconfigGroups are the groups the operator advertises for a cluster's add-on hub kubeconfig.
func HubKubeconfigGroups(cluster string) []string {
	return []string{addonGroup(cluster), AllAgentsGroup}
}

// decided reports whether the CSR already carries an Approved, Denied or
// Failed condition, and which. Like the Kubernetes helpers it looks at the
// condition type only: the API only ever sets these with status True.
func decided(csr *certificatesv1.CertificateSigningRequest) (certificatesv1.RequestConditionType, bool) {
	for _, c := range csr.Status.Conditions {
		switch c.Type {
		case certificatesv1.CertificateApproved, certificatesv1.CertificateDenied, certificatesv1.CertificateFailed:
			return c.Type, true
		}
	}
	return "", false
}

// handledSigner reports whether CSRs for signer are reviewed here.
func handledSigner(signer string) bool {
	return signer == certificatesv1.KubeAPIServerClientSignerName || signer == AgentSignerName
}

// clusterOf returns the cluster of a CSR labelled for this add-on, or false
// when the add-on label is another add-on's or either label is missing.
func clusterOf(labels map[string]string) (string, bool) {
	if labels[AddonNameLabel] != AddonName {
		return "", false
	}
	cluster := labels[ClusterNameLabel]
	return cluster, cluster != ""
}

// checkClusterLabel guards against a caller passing the Expected of another
// cluster than the one the CSR is labelled with.
func checkClusterLabel(cluster, expectedCluster string) *denial {
	if cluster != expectedCluster {
		return deny(proxyv1alpha1.ReasonClusterLabelMismatch, "metadata.labels[%s]: want %q, got %q", ClusterNameLabel, expectedCluster, cluster)
	}
	return nil
}

// checkAccepted refuses CSRs of clusters the hub does not accept.
func checkAccepted(cluster string, accepted bool) *denial {
	if !accepted {
		return deny(proxyv1alpha1.ReasonClusterNotAccepted, "cluster %q is not accepted by the hub: want ManagedCluster spec.hubAcceptsClient true", cluster)
	}
	return nil
}

// checkRequestor requires the CSR to be created by the cluster's own hub
// identity: user system:open-cluster-management:<cluster>:<agentID> in group
// system:open-cluster-management:<cluster>.
func checkRequestor(cluster, username string, groups []string) *denial {
	prefix := clusterUserPrefix(cluster)
	if agentID, ok := strings.CutPrefix(username, prefix); !ok || agentID == "" {
		return deny(proxyv1alpha1.ReasonUnexpectedRequestor, "spec.username: want %q followed by an agent ID, got %q", prefix, username)
	}
	if group := clusterGroup(cluster); !slices.Contains(groups, group) {
		return deny(proxyv1alpha1.ReasonUnexpectedRequestor, "spec.groups: want to include %q, got %q", group, groups)
	}
	return nil
}

// allowedUsages are the only usages a client certificate may ask for.
var allowedUsages = []certificatesv1.KeyUsage{
	certificatesv1.UsageDigitalSignature,
	certificatesv1.UsageKeyEncipherment,
	certificatesv1.UsageClientAuth,
}

// checkUsages requires a subset of allowedUsages that includes client auth.
func checkUsages(usages []certificatesv1.KeyUsage) *denial {
	for _, u := range usages {
		if !slices.Contains(allowedUsages, u) {
			return deny(proxyv1alpha1.ReasonUnexpectedUsages, "spec.usages: %q is not allowed; want a subset of %q including %q, got %q",
				u, allowedUsages, certificatesv1.UsageClientAuth, usages)
		}
	}
	if !slices.Contains(usages, certificatesv1.UsageClientAuth) {
		return deny(proxyv1alpha1.ReasonUnexpectedUsages, "spec.usages: want %q among them, got %q", certificatesv1.UsageClientAuth, usages)
	}
	return nil
}

// parseRequest parses spec.request the same way certs.SignCSR will.
func parseRequest(request []byte) (*x509.CertificateRequest, *denial) {
	req, err := certs.ParseCSR(request)
	if err != nil {
		return nil, deny(proxyv1alpha1.ReasonInvalidRequest, "spec.request: want a PEM CERTIFICATE REQUEST: %v", err)
	}
	return req, nil
}

// checkKey accepts RSA keys of at least 2048 bits, ECDSA P-256 and P-384
// keys, and Ed25519 keys.
func checkKey(pub crypto.PublicKey) *denial {
	const want = "want RSA of at least 2048 bits, ECDSA P-256 or P-384, or Ed25519"
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < minRSABits {
			return deny(proxyv1alpha1.ReasonWeakKey, "spec.request public key: %s, got RSA of %d bits", want, bits)
		}
		return nil
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return deny(proxyv1alpha1.ReasonWeakKey, "spec.request public key: %s, got ECDSA %s", want, k.Curve.Params().Name)
		}
		return nil
	case ed25519.PublicKey:
		return nil
	default:
		return deny(proxyv1alpha1.ReasonWeakKey, "spec.request public key: %s, got %T", want, pub)
	}
}

// checkSignature proves the requestor holds the private key.
func checkSignature(req *x509.CertificateRequest) *denial {
	if err := req.CheckSignature(); err != nil {
		return deny(proxyv1alpha1.ReasonInvalidRequest, "spec.request signature: want a valid self-signature, got %v", err)
	}
	return nil
}

// KlusterletDNSName is the one subject alternative name OCM's klusterlet puts in every add-on CSR it creates
// (<add-on>.addon.open-cluster-management.io). It is tolerated, and never copied into the certificate.
const KlusterletDNSName = AddonName + ".addon.open-cluster-management.io"

// checkSANs refuses requests for subject alternative names: these are
// client certificates, identified by their subject only. The klusterlet's
// fixed add-on name is the one exception.
func checkSANs(req *x509.CertificateRequest) *denial {
	var found []string
	if dns := req.DNSNames; len(dns) > 1 || (len(dns) == 1 && dns[0] != KlusterletDNSName) {
		found = append(found, fmt.Sprintf("DNS names %q", req.DNSNames))
	}
	if len(req.IPAddresses) > 0 {
		found = append(found, fmt.Sprintf("IP addresses %q", req.IPAddresses))
	}
	if len(req.EmailAddresses) > 0 {
		found = append(found, fmt.Sprintf("email addresses %q", req.EmailAddresses))
	}
	if len(req.URIs) > 0 {
		uris := make([]string, len(req.URIs))
		for i, u := range req.URIs {
			uris[i] = u.String()
		}
		found = append(found, fmt.Sprintf("URIs %q", uris))
	}
	if len(found) > 0 {
		return deny(proxyv1alpha1.ReasonUnexpectedSANs, "spec.request subject alternative names: want none (or only DNS %s), got %s", KlusterletDNSName, strings.Join(found, ", "))
	}
	return nil
}

// checkHubKubeconfigSubject checks the add-on hub kubeconfig subject OCM
// uses for this add-on: CN system:open-cluster-management:cluster:<cluster>:
// addon:cluster-proxy:agent:<agent>, O exactly the add-on group of the
// cluster. The API server reads only CN (user) and O (groups), so other
// attributes are not checked.
func checkHubKubeconfigSubject(cluster string, subject pkix.Name) *denial {
	prefix := addonAgentUserPrefix(cluster)
	if agent, ok := strings.CutPrefix(subject.CommonName, prefix); !ok || agent == "" {
		return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject CN: want %q followed by an agent name, got %q", prefix, subject.CommonName)
	}
	// OCM's default subject has the cluster's add-on group only; the operator advertises the all-agents group too.
	if !sameMultiset(subject.Organization, []string{addonGroup(cluster)}) && !sameMultiset(subject.Organization, HubKubeconfigGroups(cluster)) {
		return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject O: want exactly %q, or %q, got %q", []string{addonGroup(cluster)}, HubKubeconfigGroups(cluster), subject.Organization)
	}
	return nil
}

// Attribute types allowed in a proxy-agent subject.
var (
	oidCommonName         = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidOrganization       = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidOrganizationalUnit = asn1.ObjectIdentifier{2, 5, 4, 11}
)

// checkAgentSubject requires exactly the advertised subject: one CN equal to
// the expected one, O and OU equal as multisets, and no other attribute (the
// signer copies the subject verbatim into the certificate).
func checkAgentSubject(want Subject, subject pkix.Name) *denial {
	if want.CommonName == "" {
		return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject CN: no proxy-agent subject is advertised for the cluster yet, got %q", subject.CommonName)
	}
	commonNames := 0
	for _, attr := range subject.Names {
		switch {
		case attr.Type.Equal(oidCommonName):
			commonNames++
		case attr.Type.Equal(oidOrganization), attr.Type.Equal(oidOrganizationalUnit):
		default:
			return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject: want only CN, O and OU attributes, got attribute %s = %v", attr.Type, attr.Value)
		}
	}
	if commonNames != 1 {
		return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject CN: want exactly one CN attribute, %q, got %d", want.CommonName, commonNames)
	}
	if subject.CommonName != want.CommonName {
		return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject CN: want %q, got %q", want.CommonName, subject.CommonName)
	}
	if !sameMultiset(subject.Organization, want.Organizations) {
		return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject O: want %q, got %q", want.Organizations, subject.Organization)
	}
	if !sameMultiset(subject.OrganizationalUnit, want.OrganizationalUnits) {
		return deny(proxyv1alpha1.ReasonUnexpectedSubject, "subject OU: want %q, got %q", want.OrganizationalUnits, subject.OrganizationalUnit)
	}
	return nil
}

// sameMultiset reports whether a and b hold the same strings the same number
// of times, in any order; nil and empty are equal.
func sameMultiset(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
