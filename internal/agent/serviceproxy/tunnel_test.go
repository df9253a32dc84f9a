package serviceproxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

// connectService sends a CONNECT with headers to the proxy, as the user-server does, and returns the connection, a
// reader past the answer, and the answer.
func connectService(ctx context.Context, p *proxyUnderTest, headers map[string][]string) (net.Conn, *bufio.Reader, *http.Response) {
	GinkgoHelper()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", strings.TrimPrefix(p.url, "http://"))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	Expect(conn.SetDeadline(time.Now().Add(10 * time.Second))).To(Succeed())
	var b strings.Builder
	b.WriteString("CONNECT echo.team:8080 HTTP/1.1\r\nHost: echo.team:8080\r\n")
	for k, vs := range headers {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	_, err = io.WriteString(conn, b.String())
	Expect(err).NotTo(HaveOccurred())
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, &http.Request{Method: http.MethodConnect})
	Expect(err).NotTo(HaveOccurred())
	return conn, r, resp
}

var _ = Describe("service tunnels", func() {

	It("lead to an allow-listed plain-http service, which gets the requests as they were written", func(ctx SpecContext) {
		p := startProxy(func(o *Options) {
			o.Allowed = teamServices
			o.ServiceDomain = "svc.cluster.local"
		})
		echo := newEchoService("echo", nil)
		p.dialer.route("echo.team.svc.cluster.local:8080", echo.Listener.Addr().String())

		conn, r, resp := connectService(ctx, p, serviceHeaders("http", teamNamespace, "echo", "8080"))
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Expect(resp.Header.Get(proxyhttp.HeaderTunnel)).To(Equal("echo.team.svc.cluster.local:8080"),
			"the Host the service's requests carry, in the cluster's service domain")

		for i := range 2 {
			_, err := fmt.Fprintf(conn, "GET /metrics/%d?x=1 HTTP/1.1\r\nHost: echo.team.svc.cluster.local:8080\r\nAuthorization: Bearer service-decides\r\n\r\n", i)
			Expect(err).NotTo(HaveOccurred())
			answer, err := http.ReadResponse(r, nil)
			Expect(err).NotTo(HaveOccurred())
			body, err := io.ReadAll(answer.Body)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(body)).To(Equal("hello from echo"))
		}
		seen := echo.requests()
		Expect(seen).To(HaveLen(2))
		Expect(seen[1].path).To(Equal("/metrics/1"))
		Expect(seen[1].query).To(Equal("x=1"))
		Expect(seen[1].header.Get("Authorization")).To(Equal("Bearer service-decides"))
		Expect(p.dialer.dialedAddrs()).To(Equal([]string{"echo.team.svc.cluster.local:8080"}), "one connection for both requests")
		Expect(p.managedReviews.Load()).To(BeZero(), "services authenticate their callers themselves")

		By("ending when the service closes its connection")
		echo.CloseClientConnections()
		_, err := r.ReadByte()
		Expect(err).To(MatchError(io.EOF))
	})

	It("are refused with a Status and the tunnel header, and nothing is dialed for a service that may not be reached", func(ctx SpecContext) {
		p := startProxy(func(o *Options) { o.Allowed = teamServices })
		for _, tc := range []struct {
			headers map[string][]string
			code    int
			reason  metav1.StatusReason
			message string
		}{
			{serviceHeaders("http", teamNamespace, "other", "8080"), http.StatusForbidden, metav1.StatusReasonForbidden, "allow-list"},
			{serviceHeaders("http", teamNamespace, "echo", "9090"), http.StatusForbidden, metav1.StatusReasonForbidden, "allow-list"},
			{serviceHeaders("https", teamNamespace, "secure", "8443"), http.StatusBadRequest, metav1.StatusReasonBadRequest, "plain-http services only"},
			{map[string][]string{"Cluster-Proxy-Namespace": {teamNamespace}}, http.StatusBadRequest, metav1.StatusReasonBadRequest, "Cluster-Proxy-Service"},
		} {
			_, _, resp := connectService(ctx, p, tc.headers)
			Expect(resp.StatusCode).To(Equal(tc.code), "headers %v", tc.headers)
			Expect(resp.Header.Get(proxyhttp.HeaderTunnel)).To(Equal(proxyhttp.TunnelRefused))
			body, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			Expect(expectStatus(body, int32(tc.code), tc.reason).Message).To(ContainSubstring(tc.message))
		}
		Expect(p.dialer.dialedAddrs()).To(BeEmpty())

		By("answering 502 for a service it cannot reach")
		_, _, resp := connectService(ctx, p, serviceHeaders("http", teamNamespace, "stream", "8080"))
		Expect(resp.StatusCode).To(Equal(http.StatusBadGateway))
		Expect(resp.Header.Get(proxyhttp.HeaderTunnel)).To(Equal(proxyhttp.TunnelRefused))
		body, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(expectStatus(body, http.StatusBadGateway, metav1.StatusReasonInternalError).Message).To(
			ContainSubstring("the service-proxy cannot reach the service"))
	})
})
