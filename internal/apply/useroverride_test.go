package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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

func TestForeignSpecOwnerWithUserOwnedPaths(t *testing.T) {
	entry := func(manager, subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Subresource: subresource, Operation: metav1.ManagedFieldsOperationApply, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	installStrategy := []string{"spec", "installStrategy"}
	addOnMeta := []string{"spec", "addOnMeta"}
	nested := []string{"spec", "a", "b"}

	cases := []struct {
		name      string
		userOwned [][]string
		entries   []metav1.ManagedFieldsEntry
		foreign   bool
	}{
		{
			name:      "a user who only sets the user-owned installStrategy is not foreign",
			userOwned: [][]string{installStrategy},
			entries: []metav1.ManagedFieldsEntry{entry("kubectl-edit", "",
				`{"f:spec":{"f:installStrategy":{".":{},"f:type":{},"f:placements":{"k:{\"name\":\"all\",\"namespace\":\"default\"}":{".":{},"f:name":{}}}}}}`)},
			foreign: false,
		},
		{
			name:      "owning the user-owned field as a whole (a leaf) is not foreign",
			userOwned: [][]string{installStrategy},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:installStrategy":{}}}`)},
			foreign:   false,
		},
		{
			name:      "owning installStrategy and addOnMeta is foreign",
			userOwned: [][]string{installStrategy},
			entries: []metav1.ManagedFieldsEntry{entry("kubectl-edit", "",
				`{"f:spec":{"f:installStrategy":{"f:type":{}},"f:addOnMeta":{"f:displayName":{}}}}`)},
			foreign: true,
		},
		{
			name:      "owning installStrategy and addOnMeta is not foreign when both are user-owned",
			userOwned: [][]string{installStrategy, addOnMeta},
			entries: []metav1.ManagedFieldsEntry{entry("kubectl-edit", "",
				`{"f:spec":{"f:installStrategy":{"f:type":{}},"f:addOnMeta":{"f:displayName":{}}}}`)},
			foreign: false,
		},
		{
			name:      "installStrategy owned without any user-owned path is foreign",
			userOwned: nil,
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:installStrategy":{"f:type":{}}}}`)},
			foreign:   true,
		},
		{
			name:      "the user path set in one entry and a rendered field in another entry is foreign",
			userOwned: [][]string{installStrategy},
			entries: []metav1.ManagedFieldsEntry{
				entry("kubectl-edit", "", `{"f:spec":{"f:installStrategy":{"f:type":{}}}}`),
				entry("helm", "", `{"f:spec":{"f:supportedConfigs":{}}}`),
			},
			foreign: true,
		},
		{
			name:      "a nested user path: a sibling of the user-owned leaf is foreign",
			userOwned: [][]string{nested},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:a":{"f:c":{}}}}`)},
			foreign:   true,
		},
		{
			name:      "a nested user path: a field below the user-owned leaf is not foreign",
			userOwned: [][]string{nested},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:a":{"f:b":{"f:x":{}}}}}`)},
			foreign:   false,
		},
		{
			name:      "a nested user path: owning the intermediate map's existence (\".\") with the leaf is not foreign",
			userOwned: [][]string{nested},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{".":{},"f:a":{".":{},"f:b":{"f:x":{}}}}}`)},
			foreign:   false,
		},
		{
			name:      "a nested user path: owning the whole intermediate field as a leaf is foreign",
			userOwned: [][]string{nested},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:a":{}}}`)},
			foreign:   true,
		},
		{
			name:      "a nested user path does not cover a field of the same name elsewhere",
			userOwned: [][]string{nested},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:b":{"f:x":{}}}}`)},
			foreign:   true,
		},
		{
			name:      "owning spec only through its \".\" key is not foreign",
			userOwned: [][]string{installStrategy},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{".":{}}}`)},
			foreign:   false,
		},
		{
			name:      "owning spec's \".\" key and the user-owned field is not foreign",
			userOwned: [][]string{installStrategy},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{".":{},"f:spec":{".":{},"f:installStrategy":{".":{},"f:type":{}}}}`)},
			foreign:   false,
		},
		{
			name:      "owning spec's \".\" key and a rendered field is foreign",
			userOwned: [][]string{installStrategy},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{".":{},"f:addOnMeta":{}}}`)},
			foreign:   true,
		},
		{
			name:      "owning all of spec as a leaf is foreign when only a part is user-owned",
			userOwned: [][]string{installStrategy},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-replace", "", `{"f:spec":{}}`)},
			foreign:   true,
		},
		{
			name:      "a user-owned spec covers every spec field",
			userOwned: [][]string{{"spec"}},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:addOnMeta":{},"f:installStrategy":{}}}`)},
			foreign:   false,
		},
		{
			name:      "a user-owned spec path does not cover data",
			userOwned: [][]string{{"spec"}},
			entries:   []metav1.ManagedFieldsEntry{entry("someone", "", `{"f:data":{"f:x":{}}}`)},
			foreign:   true,
		},
		{
			name:      "an empty user-owned path covers nothing",
			userOwned: [][]string{{}},
			entries:   []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:installStrategy":{}}}`)},
			foreign:   true,
		},
		{
			name:      "metadata and status next to the user-owned field are not foreign",
			userOwned: [][]string{installStrategy},
			entries: []metav1.ManagedFieldsEntry{entry("kubectl-edit", "",
				`{"f:metadata":{"f:labels":{"f:team":{}}},"f:status":{"f:conditions":{}},"f:spec":{"f:installStrategy":{"f:type":{}}}}`)},
			foreign: false,
		},
		{
			name:      "the operator's own entry is never foreign, whatever it owns",
			userOwned: [][]string{installStrategy},
			entries:   []metav1.ManagedFieldsEntry{entry(FieldOwner, "", `{"f:spec":{"f:addOnMeta":{},"f:installStrategy":{}}}`)},
			foreign:   false,
		},
		{
			name:      "a status subresource writer is never foreign",
			userOwned: [][]string{installStrategy},
			entries:   []metav1.ManagedFieldsEntry{entry("addon-manager", "status", `{"f:spec":{"f:addOnMeta":{}}}`)},
			foreign:   false,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{}
			obj.SetAPIVersion("addon.open-cluster-management.io/v1alpha1")
			obj.SetKind("ClusterManagementAddOn")
			obj.SetName("cluster-proxy")
			obj.SetManagedFields(tc.entries)
			NewWithT(t).Expect(foreignSpecOwner(obj, tc.userOwned...)).To(Equal(tc.foreign))
		})
	}
}

func TestOwnsOutsideIgnoresTheDotKeyAtEveryLevel(t *testing.T) {
	cases := []struct {
		name      string
		fields    map[string]any
		userOwned [][]string
		outside   bool
	}{
		{"only a dot", map[string]any{".": map[string]any{}}, nil, false},
		{"a dot beside the user path", map[string]any{".": map[string]any{}, "f:spec": map[string]any{"f:a": map[string]any{}}}, [][]string{{"spec", "a"}}, false},
		{"a dot beside a foreign field", map[string]any{".": map[string]any{}, "f:spec": map[string]any{"f:z": map[string]any{}}}, [][]string{{"spec", "a"}}, true},
		{"nothing at all", map[string]any{}, [][]string{{"spec"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(ownsOutside(tc.fields, tc.userOwned)).To(Equal(tc.outside))
		})
	}
}

func TestUserOwnedCollectsPaths(t *testing.T) {
	var o options
	UserOwned("spec", "installStrategy")(&o)
	UserOwned("spec", "a", "b")(&o)
	NewWithT(t).Expect(o.userOwned).To(Equal([][]string{{"spec", "installStrategy"}, {"spec", "a", "b"}}))
}
