package addonapi

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
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

func TestAnUnstructuredAddOnIsReadAndWrittenAsV1beta1(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	stored := &addonv1beta1.ClusterManagementAddOn{}
	g.Expect(ToWire(managementAddOn(), stored)).To(Succeed())
	// The fake client keeps each version apart: a v1alpha1 request would find nothing.
	hub := fake.NewClientBuilder().WithScheme(conversions).WithObjects(stored).Build()
	c := NewClient(hub, V1beta1)

	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(addonv1alpha1.SchemeGroupVersion.WithKind("ClusterManagementAddOn"))
	g.Expect(c.Get(ctx, client.ObjectKey{Name: "cluster-proxy"}, u)).To(Succeed())
	g.Expect(u.GetAPIVersion()).To(Equal("addon.open-cluster-management.io/v1alpha1"))
	configs, _, _ := unstructured.NestedSlice(u.Object, "spec", "supportedConfigs")
	g.Expect(configs).To(HaveLen(2), "read as v1alpha1")

	u.SetLabels(map[string]string{"app": "changed"})
	g.Expect(c.Update(ctx, u)).To(Succeed())
	g.Expect(u.GetAPIVersion()).To(Equal("addon.open-cluster-management.io/v1alpha1"), "what the hub returned, as v1alpha1")
	got := &addonv1beta1.ClusterManagementAddOn{}
	g.Expect(hub.Get(ctx, client.ObjectKey{Name: "cluster-proxy"}, got)).To(Succeed())
	g.Expect(got.Labels).To(Equal(map[string]string{"app": "changed"}))
	g.Expect(got.Spec.DefaultConfigs).To(HaveLen(2))
}
