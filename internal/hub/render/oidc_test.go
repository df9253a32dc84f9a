package render

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestAgentOIDCFlagsAndCAVolume(t *testing.T) {
	g := NewWithT(t)
	in := agentTestInput(t)
	vars := []addonv1alpha1.CustomizedVariable{{Name: "oidcIssuerURL", Value: "https://issuer.example.com"},
		{Name: "oidcClientID", Value: "cluster-proxy"}, {Name: "oidcUsernamePrefix", Value: "-"},
		{Name: "oidcReservedNamePrefixes", Value: ""}, {Name: "oidcCAConfigMap", Value: "issuer-ca"},
		{Name: "oidcRequiredClaimsJSON", Value: `{"tenant":"t1"}`}}
	withADC(&in, addonv1alpha1.AddOnDeploymentConfigSpec{CustomizedVariables: vars})

	work, _, err := AgentWork(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Join(decodeAgentWork(g, work).container().Args, " ")).NotTo(ContainSubstring("--oidc"),
		"without the service-proxy there is nothing to authenticate")

	in.MPC.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{}
	work, _, err = AgentWork(in)
	g.Expect(err).NotTo(HaveOccurred())
	o := decodeAgentWork(g, work)
	g.Expect(o.container().Args).To(ContainElements("--oidc-issuer-url=https://issuer.example.com", "--oidc-client-id=cluster-proxy",
		"--oidc-username-prefix=-", "--oidc-reserved-name-prefixes=", "--oidc-ca-file=/etc/oidc-ca/ca.crt",
		"--oidc-required-claim=tenant=t1"))
	g.Expect(o.container().VolumeMounts).To(ContainElement(HaveField("MountPath", "/etc/oidc-ca")))
	var ca *corev1.Volume
	for i, v := range o.deployment.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil && v.ConfigMap.Name == "issuer-ca" {
			ca = &o.deployment.Spec.Template.Spec.Volumes[i]
		}
	}
	g.Expect(ca).NotTo(BeNil())
	g.Expect(*ca.ConfigMap.Optional).To(BeTrue(), "a missing ConfigMap does not keep the agent from starting")
}
