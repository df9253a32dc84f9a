package clusteragent

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/addonconfig"
)

func TestAnADCEditQueuesOnlyTheAddOnsItAppliesTo(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(addonv1alpha1.Install(scheme)).To(Succeed())
	adcRef := func(namespace, name string) addonv1alpha1.AddOnConfig {
		return addonv1alpha1.AddOnConfig{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: addonconfig.AddOnGroup, Resource: addonconfig.AddOnDeploymentConfigs},
			ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: namespace, Name: name},
		}
	}
	addOn := func(cluster string, configs ...addonv1alpha1.AddOnConfig) *addonv1alpha1.ManagedClusterAddOn {
		return &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: cluster},
			Spec: addonv1alpha1.ManagedClusterAddOnSpec{Configs: configs}}
	}
	cma := &addonv1alpha1.ClusterManagementAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName},
		Spec: addonv1alpha1.ClusterManagementAddOnSpec{SupportedConfigs: []addonv1alpha1.ConfigMeta{{
			ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: addonconfig.AddOnGroup, Resource: addonconfig.AddOnDeploymentConfigs},
			DefaultConfig:       &addonv1alpha1.ConfigReferent{Namespace: "fleet", Name: "defaults"},
		}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithIndex(&addonv1alpha1.ManagedClusterAddOn{}, index.AddOnADC, index.ADCOfAddOn).
		WithObjects(cma,
			addOn("c1", adcRef("", "proxy-config")), // its own namespace: c1/proxy-config
			addOn("c2", adcRef("shared", "proxy-config")),
			addOn("c3", adcRef("shared", "proxy-config")),
			addOn("c4"), addOn("c5")). // the ClusterManagementAddOn's default
		Build()
	r := &Reconciler{Client: c}
	queued := func(namespace, name string) []string {
		var clusters []string
		for _, req := range r.addOnsOfADC(context.Background(), &addonv1alpha1.AddOnDeploymentConfig{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}) {
			clusters = append(clusters, req.Namespace)
		}
		return clusters
	}
	g.Expect(queued("c1", "proxy-config")).To(ConsistOf("c1"))
	g.Expect(queued("shared", "proxy-config")).To(ConsistOf("c2", "c3"))
	g.Expect(queued("fleet", "defaults")).To(ConsistOf("c4", "c5"), "the default applies to the add-ons that name none")
	g.Expect(queued("c4", "another-addons-config")).To(BeEmpty())
}
