package addonapi

import (
	"testing"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
)

// addOn is a ManagedClusterAddOn as the operator writes it: an install namespace, an ADC config, registrations for
// the agent signer and for a hub kubeconfig, config references, and conditions.
func addOn() *addonv1alpha1.ManagedClusterAddOn {
	referent := addonv1alpha1.ConfigReferent{Namespace: "cluster1", Name: "proxy-config"}
	adc := addonv1alpha1.ConfigGroupResource{Group: addonv1alpha1.GroupName, Resource: "addondeploymentconfigs"}
	return &addonv1alpha1.ManagedClusterAddOn{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: "cluster1", ResourceVersion: "7", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{"kept": "yes"}},
		Spec: addonv1alpha1.ManagedClusterAddOnSpec{InstallNamespace: "open-cluster-management-cluster-proxy",
			Configs: []addonv1alpha1.AddOnConfig{{ConfigGroupResource: adc, ConfigReferent: referent}}},
		Status: addonv1alpha1.ManagedClusterAddOnStatus{
			Namespace: "open-cluster-management-cluster-proxy",
			Registrations: []addonv1alpha1.RegistrationConfig{
				{SignerName: "open-cluster-management.io/proxy-agent-signer", Subject: addonv1alpha1.Subject{User: "agent", Groups: []string{"g"}, OrganizationUnits: []string{"ou"}}},
				{SignerName: certificatesv1.KubeAPIServerClientSignerName, Subject: addonv1alpha1.Subject{User: "hub-user", Groups: []string{"hub-group"}}},
			},
			ConfigReferences: []addonv1alpha1.ConfigReference{{ConfigGroupResource: adc, ConfigReferent: referent,
				DesiredConfig: &addonv1alpha1.ConfigSpecHash{ConfigReferent: referent, SpecHash: "abc"}}},
			Conditions: []metav1.Condition{{Type: "Available", Status: metav1.ConditionTrue, Reason: "ProbeAvailable", Message: "ok"}},
		},
	}
}

func TestAManagedClusterAddOnCrossesTheWireAndBackUnchanged(t *testing.T) {
	g := NewWithT(t)
	in := addOn()
	wire := &addonv1beta1.ManagedClusterAddOn{}
	g.Expect(ToWire(in, wire)).To(Succeed())
	g.Expect(wire.APIVersion).To(Equal("addon.open-cluster-management.io/v1beta1"))
	g.Expect(wire.Kind).To(Equal("ManagedClusterAddOn"))
	g.Expect(wire.Annotations).To(HaveKeyWithValue(InstallNamespaceAnnotation, "open-cluster-management-cluster-proxy"),
		"v1beta1 has no spec.installNamespace: OCM's webhook keeps it in an annotation")
	g.Expect(wire.Annotations).To(HaveKeyWithValue("kept", "yes"))
	g.Expect(wire.Status.Registrations).To(HaveLen(2))
	g.Expect(wire.Status.Registrations[0].Type).To(Equal(addonv1beta1.CustomSigner))
	g.Expect(wire.Status.Registrations[0].CustomSigner.SignerName).To(Equal("open-cluster-management.io/proxy-agent-signer"))
	g.Expect(wire.Status.Registrations[1].Type).To(Equal(addonv1beta1.KubeClient))
	g.Expect(wire.Status.Registrations[1].KubeClient.Subject.User).To(Equal("hub-user"))
	g.Expect(in).To(Equal(addOn()), "the input is not changed")

	back := &addonv1alpha1.ManagedClusterAddOn{Spec: addonv1alpha1.ManagedClusterAddOnSpec{InstallNamespace: "stale"}}
	g.Expect(FromWire(wire, back)).To(Succeed())
	want := addOn()
	want.APIVersion, want.Kind = "addon.open-cluster-management.io/v1alpha1", "ManagedClusterAddOn"
	g.Expect(back).To(Equal(want), "a round trip keeps every field the operator writes")

	wire.Annotations[InstallNamespaceAnnotation] = "changed"
	g.Expect(back.Spec.InstallNamespace).To(Equal("open-cluster-management-cluster-proxy"), "the result shares no memory with the wire object")
}

func TestAnAddOnFromTheWireTakesItsConfigReferentFromTheDesiredConfig(t *testing.T) {
	g := NewWithT(t)
	desired := addonv1beta1.ConfigReferent{Namespace: "cluster1", Name: "proxy-config"}
	wire := &addonv1beta1.ManagedClusterAddOn{Status: addonv1beta1.ManagedClusterAddOnStatus{ConfigReferences: []addonv1beta1.ConfigReference{{
		DesiredConfig: &addonv1beta1.ConfigSpecHash{ConfigReferent: desired, SpecHash: "h"}}}}}
	out := &addonv1alpha1.ManagedClusterAddOn{}
	g.Expect(FromWire(wire, out)).To(Succeed())
	g.Expect(out.Status.ConfigReferences[0].ConfigReferent).To(Equal(addonv1alpha1.ConfigReferent{Namespace: "cluster1", Name: "proxy-config"}))
	g.Expect(out.Spec.InstallNamespace).To(BeEmpty())
	g.Expect(out.Annotations).To(BeNil(), "no annotation is made up")
}

func TestListsConvertEveryItem(t *testing.T) {
	g := NewWithT(t)
	other := addOn()
	other.Namespace, other.Spec.InstallNamespace = "cluster2", "elsewhere"
	list := &addonv1alpha1.ManagedClusterAddOnList{Items: []addonv1alpha1.ManagedClusterAddOn{*addOn(), *other}}
	wire := &addonv1beta1.ManagedClusterAddOnList{}
	g.Expect(ToWire(list, wire)).To(Succeed())
	g.Expect(wire.Items).To(HaveLen(2))
	g.Expect(wire.Items[1].Annotations).To(HaveKeyWithValue(InstallNamespaceAnnotation, "elsewhere"))
	back := &addonv1alpha1.ManagedClusterAddOnList{}
	g.Expect(FromWire(wire, back)).To(Succeed())
	g.Expect(back.Items[0].Spec.InstallNamespace).To(Equal("open-cluster-management-cluster-proxy"))
	g.Expect(back.Items[1].Spec.InstallNamespace).To(Equal("elsewhere"))
	g.Expect(back.Items[1].Annotations).NotTo(HaveKey(InstallNamespaceAnnotation))
}

// managementAddOn is the ClusterManagementAddOn as the operator renders it: a config type without a default (the
// AddOnDeploymentConfig) and one with (the ManagedProxyConfiguration).
func managementAddOn() *addonv1alpha1.ClusterManagementAddOn {
	return &addonv1alpha1.ClusterManagementAddOn{
		TypeMeta:   metav1.TypeMeta{APIVersion: "addon.open-cluster-management.io/v1alpha1", Kind: "ClusterManagementAddOn"},
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Labels: map[string]string{"app": "cluster-proxy"}},
		Spec: addonv1alpha1.ClusterManagementAddOnSpec{
			AddOnMeta: addonv1alpha1.AddOnMeta{DisplayName: "cluster-proxy"},
			SupportedConfigs: []addonv1alpha1.ConfigMeta{
				{ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: addonv1alpha1.GroupName, Resource: "addondeploymentconfigs"}},
				{ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "proxy.open-cluster-management.io", Resource: "managedproxyconfigurations"},
					DefaultConfig: &addonv1alpha1.ConfigReferent{Name: "cluster-proxy"}},
			},
			InstallStrategy: addonv1alpha1.InstallStrategy{Type: addonv1alpha1.AddonInstallStrategyManual},
		},
	}
}

func TestAClusterManagementAddOnKeepsItsDefaultConfigsAcrossTheWire(t *testing.T) {
	g := NewWithT(t)
	in := managementAddOn()
	wire := &addonv1beta1.ClusterManagementAddOn{}
	g.Expect(ToWire(in, wire)).To(Succeed())
	g.Expect(wire.Spec.DefaultConfigs).To(HaveLen(2))
	g.Expect(wire.Spec.DefaultConfigs[1].Name).To(Equal("cluster-proxy"))
	back := &addonv1alpha1.ClusterManagementAddOn{}
	g.Expect(FromWire(wire, back)).To(Succeed())
	g.Expect(back.Spec).To(Equal(in.Spec), "a config without a default stays without one")
}

func TestAnAddOnDeploymentConfigCrossesTheWireUnchanged(t *testing.T) {
	g := NewWithT(t)
	in := &addonv1alpha1.AddOnDeploymentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy-config", Namespace: "cluster1"},
		Spec: addonv1alpha1.AddOnDeploymentConfigSpec{
			ProxyConfig:           addonv1alpha1.ProxyConfig{HTTPSProxy: "https://squid:3129", NoProxy: "10.0.0.1", CABundle: []byte("pem")},
			AgentInstallNamespace: "proxy-agents",
			CustomizedVariables:   []addonv1alpha1.CustomizedVariable{{Name: "a", Value: "b"}},
			Registries:            []addonv1alpha1.ImageMirror{{Source: "quay.io", Mirror: "mirror.local"}},
		},
	}
	wire := &addonv1beta1.AddOnDeploymentConfig{}
	g.Expect(ToWire(in, wire)).To(Succeed())
	g.Expect(wire.Spec.ProxyConfig.HTTPSProxy).To(Equal("https://squid:3129"))
	back := &addonv1alpha1.AddOnDeploymentConfig{}
	g.Expect(FromWire(wire, back)).To(Succeed())
	g.Expect(back.Spec).To(Equal(in.Spec))
}

func TestOnlyTheAddOnKindsTravelAsV1beta1(t *testing.T) {
	g := NewWithT(t)
	for _, obj := range []runtime.Object{&addonv1alpha1.AddOnTemplate{}, &metav1.Status{}, &addonv1beta1.ManagedClusterAddOn{}} {
		_, ok := wireOf(obj)
		g.Expect(ok).To(BeFalse(), "%T", obj)
	}
}

func TestAnAddOnThatDoesNotConvertReachesHandlersWithItsMetadata(t *testing.T) {
	g := NewWithT(t)
	broken := &addonv1beta1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: "cluster1"},
		Status: addonv1beta1.ManagedClusterAddOnStatus{Registrations: []addonv1beta1.RegistrationConfig{{Type: addonv1beta1.KubeClient}}}}
	g.Expect(FromWire(broken, &addonv1alpha1.ManagedClusterAddOn{})).NotTo(Succeed(), "a kubeClient registration without its config")
	got, ok := model(broken).(*addonv1alpha1.ManagedClusterAddOn)
	g.Expect(ok).To(BeTrue(), "the handler's type assertion holds")
	g.Expect(got.Name).To(Equal("cluster-proxy"))
	g.Expect(got.Namespace).To(Equal("cluster1"))
	g.Expect(model(&metav1.Status{})).To(Equal(&metav1.Status{}), "other objects pass as they are")
}
