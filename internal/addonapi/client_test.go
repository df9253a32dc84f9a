package addonapi

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestAnApplyOfAClusterManagementAddOnIsSentAsV1beta1WithOnlyTheFieldsItSets(t *testing.T) {
	g := NewWithT(t)
	cma := managementAddOn()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cma)
	g.Expect(err).NotTo(HaveOccurred())
	wire, ok, err := applyToWire(client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: m}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(wire.Object).To(Equal(map[string]any{
		"apiVersion": "addon.open-cluster-management.io/v1beta1", "kind": "ClusterManagementAddOn",
		"metadata": map[string]any{"name": "cluster-proxy", "labels": map[string]any{"app": "cluster-proxy"}},
		"spec": map[string]any{
			"addOnMeta": map[string]any{"displayName": "cluster-proxy"},
			"defaultConfigs": []any{
				map[string]any{"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs", "name": "__reserved_no_default__"},
				map[string]any{"group": "proxy.open-cluster-management.io", "resource": "managedproxyconfigurations", "name": "cluster-proxy"},
			},
			"installStrategy": map[string]any{"type": "Manual"},
		},
	}), "no status, no creation time, no empty field the apply would claim")
}

func TestAnApplyOfAnyOtherKindIsSentAsIs(t *testing.T) {
	g := NewWithT(t)
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "c"}})
	g.Expect(err).NotTo(HaveOccurred())
	_, ok, err := applyToWire(client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: m}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse())
}
