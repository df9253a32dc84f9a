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
	} {
		hr, err := http.NewRequest(req.method, srv.URL+req.path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		resp, err := c.Do(hr)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
	}
	g.Expect(r.Writes()).To(BeEquivalentTo(4))
	g.Expect(r.Reads()).To(BeEquivalentTo(1))
	g.Expect(r.WritesTo("clustermanagementaddons")).To(BeEquivalentTo(1))
	g.Expect(r.WritesTo("managedclusteraddons")).To(BeEquivalentTo(1), "a subresource counts for its resource")
	g.Expect(r.WritesTo("secrets")).To(BeEquivalentTo(1))
	g.Expect(r.WritesTo("namespaces")).To(BeEquivalentTo(1))
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
