package controllers_test

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers"
)

// The manager's cache transforms a ManagedCluster down to its metadata (clusteragent.TrimCachedCluster tests what is
// kept); this checks the transform is the one the cache uses.
func TestTheCacheKeepsOnlyTheMetadataOfManagedClusters(t *testing.T) {
	g := NewWithT(t)
	var transform func(any) (any, error)
	for obj, by := range controllers.CacheOptions().ByObject {
		if _, ok := obj.(*clusterv1.ManagedCluster); ok {
			transform = by.Transform
		}
	}
	g.Expect(transform).NotTo(BeNil(), "ManagedClusters have a transform of their own")
	cluster := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "c1"},
		Status: clusterv1.ManagedClusterStatus{ClusterClaims: []clusterv1.ManagedClusterClaim{{Name: "id.k8s.io", Value: "c1"}}}}
	out, err := transform(cluster)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*clusterv1.ManagedCluster).Status).To(BeZero())
	g.Expect(out.(*clusterv1.ManagedCluster).Name).To(Equal("c1"))
}
