//go:build e2e

// Package e2enodes runs the whole product on real clusters of this machine (internal/localsystem): a hub and two
// managed clusters whose pods run, OCM's hub controllers and klusterlets as pods, the operator installed by Helm from
// the image of 'make image' with three proxy-server replicas, and squid as cluster1's only route to the hub. Run it
// with 'make e2e-nodes'.
package e2enodes

import (
	"context"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
)

const (
	timeout  = 2 * time.Minute
	interval = 250 * time.Millisecond
	// firstIndex keeps this suite's clusters apart from 'make run' (1–3) and the realcluster tests (201–204).
	firstIndex = 11
)

var (
	sys     *localsystem.System
	workDir string
	failed  bool
)

func TestE2ENodes(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "End to end on real clusters")
}

var _ = BeforeSuite(func() {
	Expect(os.Getenv("NODE_ASSETS")).NotTo(BeEmpty(), "run through 'make e2e-nodes'")
	var err error
	workDir, err = os.MkdirTemp("", "cluster-proxy-e2e-nodes-")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("work folder: %s\n", workDir)
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	opts := localsystem.DefaultOptions(workDir, firstIndex)
	opts.Log = GinkgoWriter
	began := time.Now()
	sys, err = localsystem.Start(ctx, opts)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("the system was Available in %s\n", time.Since(began).Round(time.Second))
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		failed = true
	}
})

var _ = AfterSuite(func() {
	if sys != nil {
		Expect(sys.Stop()).To(Succeed())
		Expect(sys.Leftovers()).To(BeEmpty(), "nothing of the clusters is left on the machine")
	}
	if failed || os.Getenv("KEEP_WORK") != "" {
		GinkgoWriter.Printf("logs kept in %s\n", workDir)
		return
	}
	_ = os.RemoveAll(workDir)
})
