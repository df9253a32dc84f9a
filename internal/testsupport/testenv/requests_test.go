package testenv

import (
	"net/http"
	"net/http/httptest"
	"testing"

	. "github.com/onsi/gomega"
)

func TestRequestsCountsWritesByResourceAndReads(t *testing.T) {
	g := NewWithT(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var r Requests
	c := &http.Client{Transport: r.Wrap(http.DefaultTransport)}
	for _, req := range []struct{ method, path string }{
		{http.MethodPut, "/apis/addon.open-cluster-management.io/v1alpha1/clustermanagementaddons/cluster-proxy"},
		{http.MethodPut, "/apis/addon.open-cluster-management.io/v1alpha1/namespaces/c1/managedclusteraddons/cluster-proxy/status"},
		{http.MethodPost, "/api/v1/namespaces/ns/secrets"},
		{http.MethodPost, "/api/v1/namespaces"},
		{http.MethodGet, "/api/v1/namespaces/ns/secrets"},
		{http.MethodGet, "/apis/addon.open-cluster-management.io/v1alpha1"},
	} {
		hr, err := http.NewRequest(req.method, srv.URL+req.path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		resp, err := c.Do(hr)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
	}
	g.Expect(r.Writes()).To(BeEquivalentTo(4))
	g.Expect(r.Reads()).To(BeEquivalentTo(2))
	g.Expect(r.WritesTo("clustermanagementaddons")).To(BeEquivalentTo(1))
	g.Expect(r.WritesTo("managedclusteraddons")).To(BeEquivalentTo(1), "a subresource counts for its resource")
	g.Expect(r.WritesTo("secrets")).To(BeEquivalentTo(1))
	g.Expect(r.WritesTo("namespaces")).To(BeEquivalentTo(1))
	g.Expect(r.To("addon.open-cluster-management.io/v1alpha1")).To(BeEquivalentTo(2), "requests by API group and version, discovery aside")
	g.Expect(r.To("v1")).To(BeEquivalentTo(3), "the core API")
	g.Expect(r.To("addon.open-cluster-management.io/v1beta1")).To(BeZero())
}

func TestRequestsCountsListsAndWatchesByWhatTheyAskFor(t *testing.T) {
	g := NewWithT(t)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	var r Requests
	c := &http.Client{Transport: r.Wrap(http.DefaultTransport)}
	const metadata = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	for _, req := range []struct{ path, accept string }{
		{"/apis/cluster.open-cluster-management.io/v1/managedclusters?watch=true", metadata},
		{"/apis/cluster.open-cluster-management.io/v1/managedclusters", metadata},
		{"/apis/cluster.open-cluster-management.io/v1/managedclusters/c1", "application/json"},
		{"/api/v1/namespaces/ns/secrets", "application/json"},
		{"/api/v1/namespaces/ns/secrets/s1", "application/json"},
		{"/api/v1/namespaces", "application/json"},
		{"/api/v1/namespaces/ns", "application/json"},
	} {
		hr, err := http.NewRequest(http.MethodGet, srv.URL+req.path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		hr.Header.Set("Accept", req.accept)
		resp, err := c.Do(hr)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
	}
	g.Expect(r.CollectionReadsOf("managedclusters")).To(Equal(CollectionReads{Metadata: 2}), "a GET of one cluster is no collection read")
	g.Expect(r.CollectionReadsOf("secrets")).To(Equal(CollectionReads{Whole: 1}))
	g.Expect(r.CollectionReadsOf("namespaces")).To(Equal(CollectionReads{Whole: 1}))
	g.Expect(r.Reads()).To(BeEquivalentTo(7))
}

func TestSettledIsTrueOnceTheCountStopsChanging(t *testing.T) {
	g := NewWithT(t)
	n := int64(0)
	settled := Settled(func() int64 { return n })
	g.Expect(settled()).To(BeFalse(), "no earlier poll")
	n++
	g.Expect(settled()).To(BeFalse())
	g.Expect(settled()).To(BeTrue())
}
