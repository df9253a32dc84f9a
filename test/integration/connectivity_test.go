//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

var _ = Describe("Reaching the managed cluster", Ordered, func() {
	It("konnectivity-client dials <cluster>:443 through the gRPC frontend and gets /healthz = ok", func() {
		Eventually(func(g Gomega) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code, body, err := world.grpcGet(ctx, "/healthz")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(200))
			g.Expect(body).To(Equal("ok"))
		}).Should(Succeed())
	})

	It("curl through the HTTP-CONNECT frontend gets /healthz = ok while gRPC keeps working", func() {
		out, err := world.curlThroughConnect("/healthz")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("ok"))
		_, body, err := world.grpcGet(context.Background(), "/healthz")
		Expect(err).NotTo(HaveOccurred())
		Expect(body).To(Equal("ok"))
	})

	It("refuses curl through the HTTP-CONNECT frontend without the proxy-client certificate", func() {
		out, err := curl("--proxytunnel", "-x", "https://"+addr(world.ports.connect), "--proxy-cacert", world.bundlePath,
			"-k", "https://"+clusterName+":443/healthz")
		Expect(err).To(HaveOccurred())
		Expect(out).NotTo(ContainSubstring("ok"), "nothing of the cluster came back")
		// The same command with the certificate works (the spec above), so the certificate is what is refused.
		out, err = world.curlThroughConnect("/healthz")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("ok"))
	})

	It("kubectl lists the managed cluster's namespaces through the user-server", func() {
		kc := world.userKubeconfig("viewer", world.managedToken)
		out, err := kubeclient.Kubectl(kc, "get", "namespaces", "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("namespace/kube-system"))
		Expect(out).To(ContainSubstring("namespace/open-cluster-management-cluster-proxy"), "the managed cluster, not the hub")
	})

	It("kubectl streams a watch through the user-server", func() {
		kc := world.userKubeconfig("viewer", world.managedToken)
		create := func(ctx context.Context, name string) error {
			return world.managedClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
		}
		Expect(testenv.WatchSeesNamespace(context.Background(), kc, create, 2*time.Second, timeout)).To(Succeed())
	})

	It("reaches an allow-listed service, and only that one", func() {
		token := world.managedToken
		code, body := world.userServerGet("/api/v1/namespaces/default/services/http:web:80/proxy-service/hello", token)
		Expect(code).To(Equal(200), body)
		Expect(body).To(Equal("web saw /hello"))

		code, body = world.userServerGet("/api/v1/namespaces/default/services/http:other:80/proxy-service/hello", token)
		Expect(code).To(Equal(403))
		Expect(statusOf(body)).To(HaveKeyWithValue("reason", "Forbidden"))
	})

	It("lets requests without a token through only to a service that authenticates its callers", func() {
		code, body := world.userServerGet("/api/v1/namespaces/default/services/http:web:80/proxy-service/hello", "")
		Expect(code).To(Equal(200), "web: callerAuthentication Service")
		Expect(body).To(Equal("web saw /hello"))
		code, body = world.userServerGet("/api/v1/namespaces/default/services/https:secure:443/proxy-service/hello", "")
		Expect(code).To(Equal(401), "secure: a bearer token is required")
		Expect(statusOf(body)).To(HaveKeyWithValue("reason", "Unauthorized"))
	})

	It("answers an unknown cluster with 404 and a Status body", func() {
		code, body := world.userServerGetCluster("no-such-cluster", "/api", world.managedToken)
		Expect(code).To(Equal(404))
		Expect(statusOf(body)).To(HaveKeyWithValue("kind", "Status"))
	})
})

func statusOf(body string) map[string]any {
	var s map[string]any
	Expect(json.Unmarshal([]byte(body), &s)).To(Succeed(), body)
	return s
}
