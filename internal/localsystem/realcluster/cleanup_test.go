//go:build realcluster

package realcluster

import (
	"os"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// Another process (make e2e-olm beside make e2e) that holds the machine lock while it records or removes its clusters
// keeps this one's cleaning waiting until it lets go.
func TestCleanStaleWaitsForAnotherRunHoldingTheMachineLock(t *testing.T) {
	g := NewWithT(t)
	f, err := os.OpenFile(machineLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	// A file description of its own: to flock, the same as another process's.
	g.Expect(syscall.Flock(int(f.Fd()), syscall.LOCK_EX)).To(Succeed())

	done := make(chan error, 1)
	go func() { done <- CleanStale(0) }()
	g.Consistently(done).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "cleaned while another run held the lock")

	g.Expect(syscall.Flock(int(f.Fd()), syscall.LOCK_UN)).To(Succeed())
	g.Eventually(done).WithTimeout(time.Minute).Should(Receive(BeNil()))
}
