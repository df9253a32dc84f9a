//go:build integration

package integration

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
)

var _ = Describe("Security", Ordered, func() {
	It("refuses an agent whose certificate is for another cluster, and routes nothing to it", func() {
		refusals := metric(world.serverMetrics(), "cluster_proxy_agent_identity_refusals_total")
		Expect(refusals).To(BeNumerically(">=", 0), "the proxy-server serves the refusal counter")

		world.writeAgentCertificate("impostor", "cluster-a", "default", world.ca)
		args := replaceFlag(world.agentArgs, "--agent-cert", world.file("pki/impostor/tls.crt"))
		args = replaceFlag(args, "--agent-key", world.file("pki/impostor/tls.key"))
		args = replaceFlag(args, "--agent-id", "impostor")
		args = replaceFlag(args, "--health-server-port", fmt.Sprint(freePort()))
		// It claims the real cluster's name, with a valid certificate signed by the same CA.
		impostor := newProcess("impostor-agent", world.agent.bin, args...)
		impostor.start()
		defer impostor.stop(true)

		Eventually(func() float64 {
			return metric(world.serverMetrics(), "cluster_proxy_agent_identity_refusals_total")
		}).Should(BeNumerically(">", refusals), "the proxy-server counts the refusal")
		Consistently(func(g Gomega) {
			g.Expect(world.connectedAgents(g)).To(ConsistOf("agent-1"))
		}, "2s", "200ms").Should(Succeed(), "the impostor never serves the cluster")
		Expect(world.server.logContains("cluster-a")).To(BeTrue(), "the refusal is logged with the certificate's cluster")
		for range 5 {
			_, body, err := world.grpcGet(context.Background(), "/healthz")
			Expect(err).NotTo(HaveOccurred())
			Expect(body).To(Equal("ok"))
		}
	})

	It("answers a request without credentials, or with a token nobody knows, with 401", func() {
		code, body := world.userServerGet("/api/v1/namespaces", "")
		Expect(code).To(Equal(401))
		Expect(statusOf(body)).To(HaveKeyWithValue("reason", "Unauthorized"))

		code, body = world.userServerGet("/api/v1/namespaces", "not-a-token")
		Expect(code).To(Equal(401), body)
	})

	It("maps a hub token to the hub user by impersonation, with that user's rights on the managed cluster", func() {
		kc := world.userKubeconfig("hub-user", world.hubToken)
		out, err := kubeclient.Kubectl(kc, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("cluster:hub:system:serviceaccount:team:hub-user"))
		out, err = kubeclient.Kubectl(kc, "get", "namespaces", "-o", "name")
		Expect(err).NotTo(HaveOccurred(), "RBAC on the managed cluster grants the mapped user namespace listing")
		Expect(out).To(ContainSubstring("namespace/default"))
	})

	It("answers a hub user the hub's RBAC does not let reach the cluster with 403, and sends nothing to the agent", func() {
		dials := func() float64 {
			return metric(world.agentMetrics(), `cluster_proxy_agent_dials_total{destination="service-proxy"`)
		}
		before := dials()
		code, body := world.userServerGet("/api/v1/namespaces", world.hubNobodyToken)
		Expect(code).To(Equal(403), body)
		Expect(statusOf(body)).To(HaveKeyWithValue("message", ContainSubstring(`cannot get resource "clusters/proxy"`)))
		Expect(statusOf(body)).To(HaveKeyWithValue("message", ContainSubstring("system:serviceaccount:team:nobody")))
		code, body = world.userServerGetCluster("another-cluster", "/api/v1/namespaces", world.hubToken)
		Expect(code).To(Equal(403), "hub-user may reach %s only: %s", clusterName, body)
		Expect(dials()).To(Equal(before), "no tunnel was opened to the service-proxy")
	})

	It("never sends a hub token to the managed cluster, and leaves the agents no right to review one", func() {
		// The service-proxy does not know hub tokens at all: sent straight to it through the tunnel, one is refused.
		code, body := world.serviceProxyGet("/api/v1/namespaces", "Authorization", "Bearer "+world.hubToken)
		Expect(code).To(Equal(401), body)
		// The agent's hub identity may not create TokenReviews on the hub.
		hub := must(kubernetes.NewForConfig(world.hubConfig))
		review, err := hub.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authzv1.SubjectAccessReview{
			Spec: authzv1.SubjectAccessReviewSpec{
				User:               "system:open-cluster-management:cluster:" + clusterName + ":addon:cluster-proxy:agent:proxy-agent",
				Groups:             []string{csrreview.AllAgentsGroup},
				ResourceAttributes: &authzv1.ResourceAttributes{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"},
			}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(review.Status.Allowed).To(BeFalse())
	})

	It("lets the managed cluster decide Impersonate-* headers, and takes none as the word of whoever sent them", func() {
		hub := world.userKubeconfig("hub-user", world.hubToken)
		_, err := kubeclient.Kubectl(hub, "get", "secrets", "-A", "--as=system:admin")
		Expect(err).To(MatchError(ContainSubstring(`cannot impersonate resource "users"`)),
			"a hub user asks the cluster's RBAC, which grants it no impersonation")

		viewer := world.userKubeconfig("viewer", world.managedToken)
		_, err = kubeclient.Kubectl(viewer, "get", "secrets", "-A", "--as=system:admin")
		Expect(err).To(MatchError(ContainSubstring("cannot impersonate")), "the cluster's kube-apiserver decides them for its own token")

		// A hub program with the proxy-client certificate, straight to the service-proxy through the tunnel.
		code, body := world.serviceProxyGet("/api/v1/namespaces/kube-system/secrets",
			"Authorization", "Bearer "+world.managedToken, "Impersonate-User", "system:admin", "Impersonate-Group", "system:masters")
		Expect(code).To(Equal(403), body)
		Expect(body).To(ContainSubstring("cannot impersonate"))
		code, body = world.serviceProxyGet("/api/v1/namespaces/kube-system/secrets",
			"Impersonate-User", "system:admin", "Impersonate-Group", "system:masters")
		Expect(code).To(Equal(403), body)
		Expect(body).To(ContainSubstring("impersonator certificate"), "without a token they would be the sender's word")
	})

})
