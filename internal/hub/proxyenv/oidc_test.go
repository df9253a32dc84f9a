package proxyenv

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestOIDCVariables(t *testing.T) {
	type v = addonv1alpha1.CustomizedVariable
	issuer, client := v{Name: "oidcIssuerURL", Value: "https://issuer.example.com/dex"}, v{Name: "oidcClientID", Value: "cluster-proxy"}

	t.Run("every variable", func(t *testing.T) {
		g := NewWithT(t)
		got, err := Variables([]v{{Name: "serviceDomain", Value: "svc.cluster.local"}, issuer, client,
			{Name: "oidcUsernameClaim", Value: "email"}, {Name: "oidcUsernamePrefix", Value: "oidc:"},
			{Name: "oidcGroupsClaim", Value: "groups"}, {Name: "oidcGroupsPrefix", Value: "oidc:"},
			{Name: "oidcReservedNamePrefixes", Value: "system:,dev:"}, {Name: "oidcCAConfigMap", Value: "dex-ca"},
			{Name: "oidcSigningAlgs", Value: "RS256,ES256"}, {Name: "oidcRequiredClaimsJSON", Value: `{"tenant":"t1","hd":"example.com"}`}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.ServiceDomain).To(Equal("svc.cluster.local"))
		g.Expect(got.OIDC).To(Equal(&OIDCVariables{IssuerURL: "https://issuer.example.com/dex", ClientID: "cluster-proxy",
			UsernameClaim: "email", UsernamePrefix: "oidc:", GroupsClaim: "groups", GroupsPrefix: "oidc:",
			ReservedNamePrefixes: ptr.To("system:,dev:"), CAConfigMap: "dex-ca", SigningAlgs: "RS256,ES256",
			RequiredClaims: []string{"hd=example.com", "tenant=t1"}}))
	})
	t.Run("none", func(t *testing.T) {
		g := NewWithT(t)
		// Another add-on's variable that happens to start with oidc is left alone.
		got, err := Variables([]v{{Name: "serviceDomain", Value: "svc"}, {Name: "oidcAudienceOfAnotherAddOn", Value: "x"}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.OIDC).To(BeNil())
	})
	t.Run("an empty reserved list turns the check off", func(t *testing.T) {
		g := NewWithT(t)
		got, err := Variables([]v{issuer, client, {Name: "oidcReservedNamePrefixes", Value: ""}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.OIDC.ReservedNamePrefixes).To(Equal(ptr.To("")))
	})
	for _, tc := range []struct {
		name  string
		vars  []v
		field string
	}{
		{"an issuer without a client ID", []v{{Name: "x", Value: "y"}, issuer}, "spec.customizedVariables[1].value"},
		{"a client ID without an issuer", []v{client}, "spec.customizedVariables[0].value"},
		{"a prefix without an issuer", []v{{Name: "oidcUsernamePrefix", Value: "p"}}, "spec.customizedVariables[0].value"},
		{"a malformed issuer URL", []v{{Name: "oidcIssuerURL", Value: "http://issuer.example.com"}, client}, "spec.customizedVariables[0].value"},
		{"an issuer URL without a host", []v{{Name: "oidcIssuerURL", Value: "https:///dex"}, client}, "spec.customizedVariables[0].value"},
		{"a symmetric signing algorithm", []v{issuer, client, {Name: "oidcSigningAlgs", Value: "RS256,HS256"}}, "spec.customizedVariables[2].value"},
		{"required claims that are not a JSON object of strings", []v{issuer, client, {Name: "oidcRequiredClaimsJSON", Value: `{"n":1}`}}, "spec.customizedVariables[2].value"},
		{"an empty reserved prefix in a list", []v{issuer, client, {Name: "oidcReservedNamePrefixes", Value: "system:,"}}, "spec.customizedVariables[2].value"},
		{"a CA ConfigMap that cannot be a name", []v{issuer, client, {Name: "oidcCAConfigMap", Value: "Dex CA"}}, "spec.customizedVariables[2].value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := Variables(tc.vars)
			_ = expectFieldError(g, err, tc.field, proxyv1alpha1.ReasonInvalidCustomizedVariable)
		})
	}
}
