package server

import (
	"io"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/userserver"
)

func TestUserServerReachesTheServiceProxyThroughTheInProcessDialer(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, func(s *Server) UserServer {
		return userserver.New(userserver.Options{Dialer: s, Clusters: s.Agents(), ServiceProxyPort: 7443})
	}, nil)
	serviceProxy := httpTarget(t, "c1-service-proxy")
	_, err := f.agent(t, "c1", "ns1", "agent-1", "host=c1", map[string]string{"c1:7443": serviceProxy})
	g.Expect(err).NotTo(HaveOccurred())

	client := httpsClient(f.pki.clientTLS(t, "", ""))
	get := func(path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "https://"+f.addrs.UserServer+path, nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer token")
		resp, err := client.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, string(body)
	}
	g.Eventually(func() bool { return f.srv.Ready() }).Should(BeTrue())
	for range 3 {
		code, body := get("/c1/api/v1/namespaces")
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(body).To(Equal("c1-service-proxy /api/v1/namespaces"))
	}
	code, _ := get("/unknown/api")
	g.Expect(code).To(Equal(http.StatusNotFound))
}
