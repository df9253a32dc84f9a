//go:build e2e

// Package e2e runs the whole product as a user runs it, on this machine with real parts: a hub and two managed
// clusters joined through the real OCM controllers and klusterlet agents, the operator's manager, the proxy-server
// and agents started from the Deployments it rendered, and squid as the forward proxy of cluster1 (over TLS, for its
// klusterlet and its agent). Run it with 'make e2e'.
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/system"
)

const (
	timeout  = 2 * time.Minute
	interval = 250 * time.Millisecond
)

var (
	sys     *system.System
	workDir string
	failed  bool
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "End to end")
}

var _ = BeforeSuite(func() {
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run through 'make e2e'")
	var err error
	workDir, err = os.MkdirTemp("", "cluster-proxy-e2e-")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("work folder: %s\n", workDir)
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sys, err = system.Start(ctx, system.Options{WorkDir: workDir, Binaries: system.DefaultBinaries(), Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		failed = true
	}
})

var _ = AfterSuite(func() {
	if sys != nil {
		Expect(sys.Stop()).To(Succeed())
	}
	Expect(leftoverProcesses()).To(BeEmpty(), "every process the suite started has stopped")
	if failed || os.Getenv("KEEP_WORK") != "" {
		GinkgoWriter.Printf("logs kept in %s\n", workDir)
		return
	}
	_ = os.RemoveAll(workDir)
})

// leftoverProcesses are this test process's descendants that are still alive.
func leftoverProcesses() []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	self := os.Getpid()
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		if len(fields) > 1 && fields[0] != "Z" && descendsFrom(e.Name(), self) {
			comm, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
			left = append(left, e.Name()+" "+strings.TrimSpace(string(comm)))
		}
	}
	return left
}

func descendsFrom(pid string, ancestor int) bool {
	for range 64 {
		stat, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			return false
		}
		s := string(stat)
		ppid := strings.Fields(s[strings.LastIndex(s, ")")+2:])[1]
		if ppid == "0" || ppid == "1" {
			return false
		}
		if ppid == itoa(ancestor) {
			return true
		}
		pid = ppid
	}
	return false
}
