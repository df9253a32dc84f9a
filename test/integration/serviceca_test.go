//go:build integration

package integration

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
)

var _ = Describe("Reaching https services signed by a private CA", Ordered, func() {
	const (
		securePath    = "/api/v1/namespaces/default/services/https:secure:443/proxy-service/hello"
		untrustedPath = "/api/v1/namespaces/default/services/https:untrusted:443/proxy-service/hello"
	)

	It("reaches an allow-listed https service whose CA only the service CA file names, and refuses one whose CA is in no file", func() {
		Expect(world.agentArgs).To(ContainElement("--service-ca-file="+world.serviceCAPath),
			"the rendered --service-ca-file=%s/%s points at this run's file", render.ServiceCAMount, render.ServiceCAKey)

		code, body := world.userServerGet(securePath, world.managedToken)
		Expect(code).To(Equal(200), body)
		Expect(body).To(Equal("secure saw /hello"))

		expectRefusedCertificate(untrustedPath)
	})

	It("trusts the CA the service CA file is rewritten with, without an agent restart", func() {
		pid := world.agent.pid()
		newCA := must(certs.NewCA("service-ca-2", 24*time.Hour, time.Now()))

		By("serving a certificate of a CA that is in no file yet")
		world.secureCert.Store(servingCertificate(newCA, "secure.default.svc"))
		world.secure.CloseClientConnections() // a kept-alive connection verified under the old CA must not answer
		expectRefusedCertificate(securePath)

		By("rewriting the service CA file with that CA")
		writeFile("service-ca/service-ca.crt", newCA.CertPEM)
		Eventually(func(g Gomega) {
			code, body, err := world.userServerDo(clusterName, securePath, world.managedToken)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(200), body)
			g.Expect(body).To(Equal("secure saw /hello"))
		}).Should(Succeed(), "the service-proxy re-reads the file within its 5 s check interval")
		Expect(world.agent.running()).To(BeTrue())
		Expect(world.agent.pid()).To(Equal(pid), "the agent was not restarted")

		expectRefusedCertificate(untrustedPath)
	})
})

// expectRefusedCertificate asserts the service-proxy's answer to an https service it does not trust: a 502 Status
// that names the certificate problem, passed through the user-server.
func expectRefusedCertificate(path string) {
	GinkgoHelper()
	code, body := world.userServerGet(path, world.managedToken)
	Expect(code).To(Equal(502), body)
	status := statusOf(body)
	Expect(status).To(HaveKeyWithValue("reason", "InternalError"))
	Expect(status).To(HaveKeyWithValue("message", ContainSubstring("x509: certificate signed by unknown authority")))
}
