//go:build integration

package integration

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

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

	It("gives a forged Impersonate-User no more rights than the token", func() {
		hub := world.userKubeconfig("hub-user", world.hubToken)
		out, err := kubeclient.Kubectl(hub, "auth", "whoami", "--as=system:admin", "-o", "jsonpath={.status.userInfo.username}")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("cluster:hub:system:serviceaccount:team:hub-user"), "the forged header was dropped")
		_, err = kubeclient.Kubectl(hub, "get", "secrets", "-A", "--as=system:admin")
		Expect(err).To(MatchError(ContainSubstring("Forbidden")))

		viewer := world.userKubeconfig("viewer", world.managedToken)
		_, err = kubeclient.Kubectl(viewer, "get", "secrets", "-A", "--as=system:admin")
		Expect(err).To(MatchError(ContainSubstring("cannot impersonate")), "a managed token without impersonation rights cannot impersonate")
	})
})
