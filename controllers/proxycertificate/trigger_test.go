package proxycertificate

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

func issuer() *proxyv1alpha1.ManagedProxyConfiguration {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", UID: types.UID("mpc-uid")}}
	mpc.Spec.ProxyServer.Namespace = "addon-ns"
	return mpc
}

// certificateOf is a ProxyCertificate name/secret in ns with common name cn, controlled by owner when it is set.
func certificateOf(ns, name, secret, cn string, owner *proxyv1alpha1.ManagedProxyConfiguration) *proxyv1alpha1.ProxyCertificate {
	pc := &proxyv1alpha1.ProxyCertificate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       proxyv1alpha1.ProxyCertificateSpec{SecretName: secret, CommonName: cn},
	}
	if owner != nil {
		pc.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: proxyv1alpha1.GroupVersion.String(), Kind: "ManagedProxyConfiguration",
			Name: owner.Name, UID: owner.UID, Controller: ptr.To(true),
		}}
	}
	return pc
}

func TestOnlyTheIssuersOwnCertificateInItsOwnSecretGetsARole(t *testing.T) {
	mpc := issuer()
	imp, client := proxyv1alpha1.ImpersonatorSecretName, contract.SecretNamesOf(mpc).ProxyClient
	stranger := issuer()
	stranger.UID = "another-uid"
	for _, tc := range []struct {
		name string
		pc   *proxyv1alpha1.ProxyCertificate
		role string
	}{
		{"the impersonator", certificateOf("addon-ns", imp, imp, contract.ImpersonatorCommonName, mpc), contract.ImpersonatorRoleURI},
		{"proxy-client", certificateOf("addon-ns", client, client, "cluster-proxy-proxy-client", mpc), contract.ProxyClientRoleURI},
		{"the impersonator retargeted to a Secret someone reads", certificateOf("addon-ns", imp, "stolen", contract.ImpersonatorCommonName, mpc), ""},
		{"proxy-client retargeted", certificateOf("addon-ns", client, "stolen", "cluster-proxy-proxy-client", mpc), ""},
		{"the name in another namespace", certificateOf("tenant", client, client, "cluster-proxy-proxy-client", mpc), ""},
		{"the name without an owner", certificateOf("addon-ns", client, client, "cluster-proxy-proxy-client", nil), ""},
		{"the name owned by another configuration", certificateOf("addon-ns", client, client, "cluster-proxy-proxy-client", stranger), ""},
		{"a tenant's certificate with the proxy-client's common name", certificateOf("addon-ns", "mine", "mine", "cluster-proxy-proxy-client", nil), ""},
	} {
		NewWithT(t).Expect(operatorRole(tc.pc, mpc)).To(Equal(tc.role), tc.name)
	}
}

func TestTheImpersonatorsNameIsRefusedOutsideItsOwnSecret(t *testing.T) {
	mpc := issuer()
	imp := proxyv1alpha1.ImpersonatorSecretName
	g := NewWithT(t)
	g.Expect(reservedName(certificateOf("addon-ns", imp, imp, contract.ImpersonatorCommonName, mpc), mpc)).To(Succeed())

	err := reservedName(certificateOf("addon-ns", imp, "stolen", contract.ImpersonatorCommonName, mpc), mpc)
	g.Expect(err).To(MatchError(ContainSubstring("spec.secretName")), "a retargeted reserved certificate issues nothing")
	g.Expect(reservedName(certificateOf("tenant", "x", "x", contract.ImpersonatorCommonName, nil), mpc)).
		To(MatchError(ContainSubstring("spec.commonName")))
	g.Expect(reservedName(certificateOf("addon-ns", "x", "x", contract.AgentCommonNamePrefix+"c1", nil), mpc)).
		To(MatchError(ContainSubstring("spec.commonName")))
}

func TestARoleBecomesTheCertificatesURI(t *testing.T) {
	g := NewWithT(t)
	pc := certificateOf("addon-ns", "x", "x", "x", nil)
	spec, err := leafSpec(pc, contract.ImpersonatorRoleURI)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(spec.URIs).To(HaveLen(1))
	g.Expect(spec.URIs[0].String()).To(Equal(contract.ImpersonatorRoleURI))
	spec, err = leafSpec(pc, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(spec.Usages).To(ConsistOf(certs.UsageClientAuth), "client-only unless asked")
	g.Expect(spec.URIs).To(HaveLen(1))
	g.Expect(spec.URIs[0].String()).To(Equal("urn:open-cluster-management:cluster-proxy:certificate:addon-ns/x"),
		"a tenant's client certificate names its ProxyCertificate, for the frontends to authorize")

	pc.Spec.Usages = []proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageServerAuth}
	spec, err = leafSpec(pc, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(spec.URIs).To(BeEmpty(), "a serving certificate names no client")
}
