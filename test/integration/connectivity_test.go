//go:build integration

package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		out, err := kubectl(kc, "get", "namespaces", "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(ContainSubstring("namespace/kube-system"))
		Expect(out).To(ContainSubstring("namespace/open-cluster-management-cluster-proxy"), "the managed cluster, not the hub")
	})

	It("kubectl streams a watch through the user-server", func() {
		kc := world.userKubeconfig("viewer", world.managedToken)
		bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kc, "get", "namespaces", "--watch-only", "-o", "name")
		stdout := must(cmd.StdoutPipe())
		Expect(cmd.Start()).To(Succeed())
		defer func() { cancel(); _ = cmd.Wait() }()
		lines := make(chan string, 16)
		go func() {
			s := bufio.NewScanner(stdout)
			for s.Scan() {
				lines <- s.Text()
			}
			close(lines)
		}()

		// Create namespaces until the watch reports one: the watch may not be established when the first is made.
		Eventually(func(g Gomega) {
			name := "watched-" + time.Now().Format("150405.000000")
			name = strings.ReplaceAll(name, ".", "-")
			g.Expect(world.managedClient.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
			select {
			case line := <-lines:
				g.Expect(line).To(HavePrefix("namespace/watched-"))
			case <-time.After(2 * time.Second):
				g.Expect("no event").To(BeEmpty(), "the watch streamed nothing")
			}
		}, timeout, 0).Should(Succeed())
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
