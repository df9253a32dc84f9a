package clusteragent

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
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

func TestTrimCachedClusterKeepsItsMetadataOnly(t *testing.T) {
	g := NewWithT(t)
	now := metav1.Now()
	cluster := &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: "c1", Labels: map[string]string{"region": "eu"}, DeletionTimestamp: &now,
			Annotations:   map[string]string{clusterv1.ClusterImageRegistriesAnnotationKey: `{"registries":[]}`},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "registration", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)}},
		},
		Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true, ManagedClusterClientConfigs: []clusterv1.ClientConfig{
			{URL: "https://c1.example:6443", CABundle: []byte("-----BEGIN CERTIFICATE-----")}}},
		Status: clusterv1.ManagedClusterStatus{
			Conditions:    []metav1.Condition{{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionTrue}},
			ClusterClaims: []clusterv1.ManagedClusterClaim{{Name: "id.k8s.io", Value: "c1"}},
		},
	}
	out, err := TrimCachedCluster(cluster)
	g.Expect(err).NotTo(HaveOccurred())
	trimmed := out.(*clusterv1.ManagedCluster)
	g.Expect(trimmed.Spec).To(BeZero(), "client configs and their CA bundles are not cached")
	g.Expect(trimmed.Status).To(BeZero(), "the status the klusterlet keeps rewriting is not cached")
	g.Expect(trimmed.ManagedFields).To(BeEmpty())
	g.Expect(trimmed.Annotations).To(HaveKey(clusterv1.ClusterImageRegistriesAnnotationKey), "a pass reads the image registries")
	g.Expect(trimmed.Labels).To(HaveKeyWithValue("region", "eu"))
	g.Expect(trimmed.DeletionTimestamp).NotTo(BeNil(), "a pass reads the deletion")
}
