package clusteragent

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
)

func TestTrimCachedWorkKeepsWhatTheReconcilerReads(t *testing.T) {
	g := NewWithT(t)
	work := &workv1.ManifestWork{
		ObjectMeta: metav1.ObjectMeta{
			Name: "w", Generation: 3, Annotations: map[string]string{apply.HashAnnotation: "abc"},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: apply.FieldOwner, FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)},
				{Manager: "kubectl-edit", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:workload":{}}}`)},
			},
		},
		Spec: workv1.ManifestWorkSpec{Workload: workv1.ManifestsTemplate{Manifests: []workv1.Manifest{
			{RawExtension: runtime.RawExtension{Raw: []byte(`{"kind":"Namespace"}`)}},
		}}},
		Status: workv1.ManifestWorkStatus{Conditions: []metav1.Condition{{Type: workv1.WorkApplied, Status: metav1.ConditionTrue, ObservedGeneration: 3}}},
	}
	out, err := TrimCachedWork(work)
	g.Expect(err).NotTo(HaveOccurred())
	trimmed := out.(*workv1.ManifestWork)
	g.Expect(trimmed.Spec.Workload.Manifests).To(BeEmpty(), "the manifests, the bulk of a work, are not cached")
	g.Expect(trimmed.Annotations).To(HaveKeyWithValue(apply.HashAnnotation, "abc"), "the rendered hash decides")
	g.Expect(trimmed.ManagedFields).To(HaveLen(1), "the operator's own managed fields are dropped")
	g.Expect(trimmed.ManagedFields[0].Manager).To(Equal("kubectl-edit"), "another writer stays visible")
	g.Expect(workApplied(trimmed)).To(BeTrue(), "the status the conditions come from is kept")
}
