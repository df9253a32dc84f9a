package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestContains(t *testing.T) {
	cases := []struct {
		name       string
		have, want any
		contains   bool
	}{
		{"equal scalars", "a", "a", true},
		{"different scalars", "a", "b", false},
		{"extra keys in have (server defaults)", map[string]any{"a": 1.0, "b": 2.0}, map[string]any{"a": 1.0}, true},
		{"missing key in have", map[string]any{}, map[string]any{"a": 1.0}, false},
		{"zero value in want matches a missing key", map[string]any{}, map[string]any{"a": "", "b": false, "c": 0.0, "d": map[string]any{}, "e": []any{}}, true},
		{"nested difference", map[string]any{"a": map[string]any{"b": "x"}}, map[string]any{"a": map[string]any{"b": "y"}}, false},
		{"list of the same length, element subsets", []any{map[string]any{"n": "a", "x": 1.0}}, []any{map[string]any{"n": "a"}}, true},
		{"an extra list element in have (tampering)", []any{"a", "b"}, []any{"a"}, false},
		{"a missing list element in have", []any{"a"}, []any{"a", "b"}, false},
		{"a type change", map[string]any{"a": "1"}, map[string]any{"a": 1.0}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(Contains(tc.have, tc.want)).To(Equal(tc.contains))
		})
	}
}

func TestForeignSpecOwner(t *testing.T) {
	entry := func(manager, subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Subresource: subresource, FieldsV1: metav1.NewFieldsV1(fields)}
	}
	cases := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		foreign bool
	}{
		{"only the operator", []metav1.ManagedFieldsEntry{entry(FieldOwner, "", `{"f:spec":{}}`)}, false},
		{"a status writer", []metav1.ManagedFieldsEntry{entry("kube-controller-manager", "status", `{"f:status":{}}`)}, false},
		{"a metadata-only writer (labels, finalizers)", []metav1.ManagedFieldsEntry{entry("kubectl-label", "", `{"f:metadata":{"f:labels":{}}}`)}, false},
		{"kubectl edit of the spec", []metav1.ManagedFieldsEntry{entry("kubectl-edit", "", `{"f:spec":{"f:replicas":{}}}`)}, true},
		{"another writer of data", []metav1.ManagedFieldsEntry{entry("someone", "", `{"f:data":{"f:x":{}}}`)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ManagedFields: tc.entries}}
			NewWithT(t).Expect(foreignSpecOwner(obj)).To(Equal(tc.foreign))
		})
	}
}
