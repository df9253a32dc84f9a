package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestKeepForeignManagedFieldsDropsTheOperatorsOwnEntries(t *testing.T) {
	g := NewWithT(t)
	obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: FieldOwner, FieldsV1: metav1.NewFieldsV1(`{"f:data":{}}`)},
		{Manager: "kube-controller-manager", Subresource: "status", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)},
		{Manager: "kubectl-edit", FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:x":{}}}`)},
	}}}
	out, err := KeepForeignManagedFields(obj)
	g.Expect(err).NotTo(HaveOccurred())
	kept := out.(*corev1.Secret).ManagedFields
	g.Expect(kept).To(HaveLen(1))
	g.Expect(kept[0].Manager).To(Equal("kubectl-edit"))
	g.Expect(foreignSpecOwner(out.(*corev1.Secret))).To(BeTrue(), "tamper detection still sees the foreign writer")
}

func TestNotRenderedPathsAreLeftOutOfWhatIsApplied(t *testing.T) {
	g := NewWithT(t)
	var o options
	NotRendered("spec", "installStrategy")(&o)
	NotRendered("spec", "a", "b")(&o)
	g.Expect(o.notRendered).To(Equal([][]string{{"spec", "installStrategy"}, {"spec", "a", "b"}}))

	obj := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "x"},
		"spec":     map[string]any{"installStrategy": map[string]any{"type": ""}, "a": map[string]any{"b": 1, "c": 2}, "d": 3},
	}}
	want, err := renderedMap(obj, obj.GroupVersionKind(), o.notRendered)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(want["spec"]).To(Equal(map[string]any{"a": map[string]any{"c": 2.0}, "d": 3.0}))
}
