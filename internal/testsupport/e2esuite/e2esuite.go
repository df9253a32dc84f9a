// Package e2esuite runs the local system (internal/localsystem) under a Ginkgo suite, for the end-to-end suites
// (make e2e, make e2e-olm): started once before the specs, stopped after with nothing left on the machine, its work
// folder kept when a spec failed or KEEP_WORK is set.
package e2esuite

import (
	"context"
	"os"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
)

// Suite is a running local system and its work folder.
type Suite struct {
	Sys     *localsystem.System
	WorkDir string
	failed  bool
}

// Start makes a work folder named after name and starts the system there within timeout, from
// localsystem.DefaultOptions at firstIndex changed by configure (nil leaves them). Call it in BeforeSuite; the target
// is named when NODE_ASSETS is missing.
func Start(name, target string, firstIndex int, timeout time.Duration, configure func(*localsystem.Options)) *Suite {
	ginkgo.GinkgoHelper()
	gomega.Expect(os.Getenv("NODE_ASSETS")).NotTo(gomega.BeEmpty(), "run through 'make %s'", target)
	dir, err := os.MkdirTemp("", name+"-")
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.GinkgoWriter.Printf("work folder: %s\n", dir)
	s := &Suite{WorkDir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	opts := localsystem.DefaultOptions(dir, firstIndex)
	opts.Log = ginkgo.GinkgoWriter
	if configure != nil {
		configure(&opts)
	}
	began := time.Now()
	s.Sys, err = localsystem.Start(ctx, opts)
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.GinkgoWriter.Printf("the system was Available in %s\n", time.Since(began).Round(time.Second))
	return s
}

// Record notes a failed spec, so that Stop keeps the logs; call it from ReportAfterEach.
func (s *Suite) Record(r ginkgo.SpecReport) {
	if s != nil && r.Failed() {
		s.failed = true
	}
}

// Stop stops the system, expects nothing of it left on the machine, and removes the work folder unless a spec failed
// or KEEP_WORK is set. Call it in AfterSuite; a suite whose start failed has nothing to stop.
func (s *Suite) Stop() {
	ginkgo.GinkgoHelper()
	if s == nil {
		return
	}
	if s.Sys != nil {
		if s.failed {
			path, err := s.Sys.SaveHubState(context.Background())
			ginkgo.GinkgoWriter.Printf("the hub's objects at the end: %s (%v)\n", path, err)
		}
		gomega.Expect(s.Sys.Stop()).To(gomega.Succeed())
		gomega.Expect(s.Sys.Leftovers()).To(gomega.BeEmpty(), "nothing of the clusters is left on the machine")
	}
	if s.failed || os.Getenv("KEEP_WORK") != "" {
		ginkgo.GinkgoWriter.Printf("logs kept in %s\n", s.WorkDir)
		return
	}
	_ = os.RemoveAll(s.WorkDir)
}

// ExpectEveryClusterAvailable waits until every managed cluster's ClusterProxyStatus and ManagedClusterAddOn say
// Available.
func (s *Suite) ExpectEveryClusterAvailable() {
	ginkgo.GinkgoHelper()
	gomega.Eventually(func(g gomega.Gomega) {
		states, err := s.Sys.States(context.Background())
		g.Expect(err).NotTo(gomega.HaveOccurred())
		for _, st := range states {
			g.Expect(st.Available).To(gomega.BeTrue(), "%s: %s", st.Name, st.Status)
			g.Expect(string(st.AddOnAvailable)).To(gomega.Equal("True"), "%s: the ManagedClusterAddOn", st.Name)
		}
	}).Should(gomega.Succeed())
}
