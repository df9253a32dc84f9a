package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestForeignSpecOwnerLeavesUserOwnedFieldsAlone(t *testing.T) {
	installStrategy := []string{"spec", "installStrategy"}
	nested := []string{"spec", "a", "b"}
	cases := []struct {
		name      string
		fields    string
		userOwned [][]string
		foreign   bool
	}{
		{"a user setting only the install strategy", `{"f:spec":{"f:installStrategy":{"f:type":{}}}}`, [][]string{installStrategy}, false},
		{"a user setting the install strategy and the add-on meta", `{"f:spec":{"f:installStrategy":{},"f:addOnMeta":{}}}`, [][]string{installStrategy}, true},
		{"the same writer without user-owned paths", `{"f:spec":{"f:installStrategy":{"f:type":{}}}}`, nil, true},
		{"a field beside a nested user-owned path", `{"f:spec":{"f:a":{"f:c":{}}}}`, [][]string{nested}, true},
		{"a field inside a nested user-owned path", `{"f:spec":{"f:a":{"f:b":{"f:x":{}}}}}`, [][]string{nested}, false},
		{"ownership of the spec object itself only", `{"f:spec":{".":{},"f:installStrategy":{}}}`, [][]string{installStrategy}, false},
		{"a metadata-only writer", `{"f:metadata":{"f:labels":{}}}`, [][]string{installStrategy}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-edit", FieldsV1: metav1.NewFieldsV1(tc.fields)},
			}}}
			NewWithT(t).Expect(foreignSpecOwner(obj, tc.userOwned...)).To(Equal(tc.foreign))
		})
	}
}

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
