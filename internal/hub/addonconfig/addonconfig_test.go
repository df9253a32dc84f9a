package addonconfig

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestConfigurationOf(t *testing.T) {
	addOn := func(configs ...addonv1alpha1.AddOnConfig) addonv1alpha1.ManagedClusterAddOn {
		return addonv1alpha1.ManagedClusterAddOn{
			ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: "c1"},
			Spec:       addonv1alpha1.ManagedClusterAddOnSpec{Configs: configs},
		}
	}
	mpcConfig := func(name string) addonv1alpha1.AddOnConfig {
		return addonv1alpha1.AddOnConfig{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: proxyv1alpha1.GroupVersion.Group, Resource: "managedproxyconfigurations"},
			ConfigReferent:      addonv1alpha1.ConfigReferent{Name: name},
		}
	}
	adc := addonv1alpha1.AddOnConfig{
		ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
		ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: "c1", Name: "proxy-config"},
	}
	for name, tc := range map[string]struct {
		mca  addonv1alpha1.ManagedClusterAddOn
		want string
	}{
		"no configs: the default":                 {addOn(), "cluster-proxy"},
		"only an AddOnDeploymentConfig":           {addOn(adc), "cluster-proxy"},
		"a referenced configuration":              {addOn(adc, mpcConfig("edge")), "edge"},
		"the first reference wins, as in render":  {addOn(mpcConfig("edge"), mpcConfig("core")), "edge"},
		"a reference without a name: the default": {addOn(mpcConfig("")), "cluster-proxy"},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(ConfigurationOf(&tc.mca)).To(Equal(tc.want))
		})
	}
}

func TestADCFromSpecConfigsThenTheDefault(t *testing.T) {
	g := NewWithT(t)
	cma := &addonv1alpha1.ClusterManagementAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName},
		Spec: addonv1alpha1.ClusterManagementAddOnSpec{SupportedConfigs: []addonv1alpha1.ConfigMeta{{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: AddOnGroup, Resource: AddOnDeploymentConfigs},
			DefaultConfig:       &addonv1alpha1.ConfigReferent{Namespace: "fleet", Name: "defaults"},
		}}}}
	none := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: "c1"}}
	g.Expect(ADC(none, cma)).To(Equal(Ref{Name: "defaults", Namespace: "fleet",
		Field: "ClusterManagementAddOn cluster-proxy spec.supportedConfigs[0].defaultConfig"}))
	g.Expect(ADC(none, nil)).To(Equal(Ref{}))
	own := none.DeepCopy()
	own.Spec.Configs = []addonv1alpha1.AddOnConfig{{
		ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: AddOnGroup, Resource: AddOnDeploymentConfigs},
		ConfigReferent:      addonv1alpha1.ConfigReferent{Name: "proxy-config"},
	}}
	g.Expect(ADC(own, cma)).To(Equal(Ref{Name: "proxy-config", Namespace: "c1",
		Field: "ManagedClusterAddOn c1/cluster-proxy spec.configs[0]", FromAddOn: true}), "the add-on's own reference wins, in its namespace")
}

func TestMPCNamesTheFieldItCameFrom(t *testing.T) {
	g := NewWithT(t)
	mca := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: "c1"}}
	g.Expect(MPC(mca)).To(Equal(Ref{Name: "cluster-proxy", Field: "ClusterManagementAddOn cluster-proxy defaults"}))
	mca.Spec.Configs = []addonv1alpha1.AddOnConfig{{
		ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: proxyv1alpha1.GroupVersion.Group, Resource: ManagedProxyConfigurations},
		ConfigReferent:      addonv1alpha1.ConfigReferent{Name: "edge"},
	}}
	g.Expect(MPC(mca)).To(Equal(Ref{Name: "edge", Namespace: "c1", Field: "ManagedClusterAddOn c1/cluster-proxy spec.configs[0]", FromAddOn: true}))
}
