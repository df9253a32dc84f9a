//go:build integration

package integration

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

var _ = Describe("Faults", Ordered, func() {
	// recoveredWithin restarts p after killing it and returns how long requests took to succeed again.
	recoveredWithin := func(p *process) time.Duration {
		p.stop(true)
		p.start()
		restarted := time.Now()
		Eventually(func(g Gomega) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, body, err := world.grpcGet(ctx, "/healthz")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(body).To(Equal("ok"))
			code, _, err := world.userServerDo(clusterName, "/api", world.managedToken)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(code).To(Equal(200))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		return time.Since(restarted)
	}

	It("gets the tunnel back within 10 s after the proxy-server is killed and restarted", func() {
		took := recoveredWithin(world.server)
		AddReportEntry("proxy-server restart to first successful request", took.String())
	})

	It("gets the tunnel back within 10 s after the agent is killed and restarted", func() {
		took := recoveredWithin(world.agent)
		AddReportEntry("agent restart to first successful request", took.String())
	})
})
