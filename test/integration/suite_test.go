//go:build integration

// Package integration runs the data plane as it runs in production, with real processes over real sockets on
// 127.0.0.1: the proxy-server and proxy-agent binaries started with the command lines the operator renders, a real
// kube-apiserver (envtest) as the managed cluster and another as the hub, an HTTP service on the managed side, and
// real clients (konnectivity-client, curl, kubectl). Run it with 'make test-integration'.
package integration

import (
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

const (
	timeout  = 30 * time.Second
	interval = 100 * time.Millisecond
)

// workDir holds binaries, certificates, kubeconfigs and logs of one run; it is kept when a spec fails.
var workDir string

func TestIntegration(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Data plane integration")
}

var _ = BeforeSuite(func() {
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run through 'make test-integration', which sets KUBEBUILDER_ASSETS")
	var err error
	workDir, err = os.MkdirTemp("", "cluster-proxy-integration-")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("work folder: %s\n", workDir)
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)
	world = startWorld()
})

// failed records whether any spec failed, so the work folder (logs) is kept for a look.
var failed bool

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		failed = true
	}
})

var _ = AfterSuite(func() {
	if world != nil {
		world.stop()
	}
	if !failed && os.Getenv("KEEP_WORK") == "" {
		_ = os.RemoveAll(workDir)
	} else {
		GinkgoWriter.Printf("logs kept in %s\n", workDir)
	}
})
