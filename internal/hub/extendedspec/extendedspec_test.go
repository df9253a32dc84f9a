package extendedspec

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/addontypes"
)

// throughAddonTypes is mpc after a read-modify-write by a client of the add-on's types: the fields its types lack are
// gone, and the API server fills in the defaults of those that have one.
func throughAddonTypes(t *testing.T, mpc *proxyv1alpha1.ManagedProxyConfiguration) *proxyv1alpha1.ManagedProxyConfiguration {
	t.Helper()
	out, err := addontypes.RoundTrip(mpc)
	if err != nil {
		t.Fatal(err)
	}
	if out.Spec.Deploy == nil {
		out.Spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{}
	}
	out.Spec.Deploy.Ports.HTTPConnectServer = defaultHTTPConnectServer
	if out.Spec.UserServer != nil {
		out.Spec.UserServer.HubAuthorization = defaultHubAuthorization
	}
	return out
}

func extended() *proxyv1alpha1.ManagedProxyConfiguration {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	mpc.Name = "cluster-proxy"
	mpc.Spec.ProxyServer.Image = "proxy:1"
	mpc.Spec.Authentication.Signer.Type = proxyv1alpha1.SelfSigned
	mpc.Spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{ProxyServer: 8090, HTTPConnectServer: 18094}}
	mpc.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{AdditionalSANs: []string{"users.example.com"},
		AllowedServices:  []proxyv1alpha1.AllowedService{{Namespace: "monitoring", Name: "prometheus", Port: 9090}},
		HubAuthorization: proxyv1alpha1.HubAuthorizationNone}
	mpc.Spec.TLSProfile = &proxyv1alpha1.ManagedProxyConfigurationTLSProfile{MinTLSVersion: "VersionTLS13"}
	mpc.Spec.NetworkPolicies = &proxyv1alpha1.ManagedProxyConfigurationNetworkPolicies{Enabled: true}
	mpc.Spec.HubUsers = &proxyv1alpha1.HubUsers{Prefix: "hub:"}
	mpc.Spec.ProxyAgent.AgentNodePlacements = map[string]proxyv1alpha1.NodePlacement{"c1": {NodeSelector: map[string]string{"infra": ""}}}
	mpc.Spec.ProxyServer.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	mpc.Spec.ProxyAgent.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}}
	return mpc
}

func TestRestoresWhatAClientOfTheAddonTypesDropped(t *testing.T) {
	g := NewWithT(t)
	mpc := extended()
	mpc.Annotations = map[string]string{Annotation: Record(mpc)}
	want := mpc.DeepCopy()

	updated := throughAddonTypes(t, mpc)
	updated.Spec.UserServer.AdditionalSANs = append(updated.Spec.UserServer.AdditionalSANs, "more.example.com") // what the client meant
	g.Expect(Of(updated).Empty()).To(BeTrue(), "every extended setting is gone")
	g.Expect(updated.Annotations).To(HaveKey(Annotation), "the client keeps the metadata")

	dropped := Restore(updated)
	g.Expect(dropped).To(ConsistOf("spec.hubUsers", "spec.networkPolicies", "spec.tlsProfile", "spec.deploy.ports.httpConnectServer",
		"spec.proxyAgent.agentNodePlacements", "spec.userServer.allowedServices", "spec.userServer.hubAuthorization",
		"spec.proxyServer.resources", "spec.proxyAgent.resources"))
	g.Expect(Of(updated)).To(Equal(Of(want)), "the last good settings are back")
	g.Expect(updated.Spec.UserServer.AdditionalSANs).To(ConsistOf("users.example.com", "more.example.com"), "the client's own change stays")
}

func TestLeavesChangesOfSomeSettingsAlone(t *testing.T) {
	g := NewWithT(t)
	mpc := extended()
	mpc.Annotations = map[string]string{Annotation: Record(mpc)}
	mpc.Spec.TLSProfile = nil
	mpc.Spec.UserServer.AllowedServices = nil
	g.Expect(Restore(mpc)).To(BeNil(), "a user's edit that leaves other settings")
	g.Expect(mpc.Spec.TLSProfile).To(BeNil())
	g.Expect(Record(mpc)).NotTo(ContainSubstring("tlsProfile"), "the record follows")
}

func TestRestoresNothingWithoutARecord(t *testing.T) {
	g := NewWithT(t)
	plain := &proxyv1alpha1.ManagedProxyConfiguration{}
	plain.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{HubAuthorization: defaultHubAuthorization}
	plain.Spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{HTTPConnectServer: defaultHTTPConnectServer}}
	g.Expect(Of(plain).Empty()).To(BeTrue(), "defaults are no settings")
	g.Expect(Record(plain)).To(BeEmpty())
	g.Expect(Restore(plain)).To(BeNil())

	removed := extended()
	removed.Annotations = map[string]string{Annotation: Record(removed)}
	removed = throughAddonTypes(t, removed)
	delete(removed.Annotations, Annotation) // removed on purpose, with the annotation
	g.Expect(Restore(removed)).To(BeNil())

	garbled := throughAddonTypes(t, extended())
	garbled.Annotations = map[string]string{Annotation: "{not json"}
	g.Expect(Restore(garbled)).To(BeNil(), "an unreadable record is none")
}

// The last setting removed alone is a user's removal; with another change in the same update, it is a drop.
func TestTellsARemovalOfTheLastSettingFromADrop(t *testing.T) {
	g := NewWithT(t)
	one := &proxyv1alpha1.ManagedProxyConfiguration{}
	one.Spec.ProxyServer.Image = "proxy:1"
	one.Spec.NetworkPolicies = &proxyv1alpha1.ManagedProxyConfigurationNetworkPolicies{Enabled: true}
	one.Spec.Deploy = &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{ // as defaulted
		ProxyServer: 8090, AgentServer: 8091, HealthServer: 8092, AdminServer: 8095, HTTPConnectServer: defaultHTTPConnectServer}}
	one.Annotations = map[string]string{Annotation: Record(one)}

	turnedOff := one.DeepCopy()
	turnedOff.Spec.NetworkPolicies = nil
	g.Expect(Restore(turnedOff)).To(BeNil(), "turned off by its user")
	g.Expect(turnedOff.Spec.NetworkPolicies).To(BeNil())

	g.Expect(Restore(throughAddonTypes(t, one))).To(BeNil(), "the same seen from outside: nothing tells it from a removal")

	dropped := throughAddonTypes(t, one)
	dropped.Spec.ProxyServer.Image = "proxy:2" // what the client came to change
	g.Expect(Restore(dropped)).To(Equal([]string{"spec.networkPolicies"}))
	g.Expect(dropped.Spec.NetworkPolicies.Enabled).To(BeTrue())
}

func TestRestoresAProvidedSigner(t *testing.T) {
	g := NewWithT(t)
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	mpc.Spec.Authentication.Signer.Type = proxyv1alpha1.Provided
	mpc.Spec.Authentication.Signer.Provided = &proxyv1alpha1.AuthenticationProvided{SecretRef: &proxyv1alpha1.SecretReference{Name: "my-ca"}}
	mpc.Annotations = map[string]string{Annotation: Record(mpc)}
	mpc.Spec.Authentication.Signer.Provided = nil
	g.Expect(Restore(mpc)).To(Equal([]string{"spec.authentication.signer.provided"}))
	g.Expect(mpc.Spec.Authentication.Signer.Provided.SecretRef.Name).To(Equal("my-ca"))
}
