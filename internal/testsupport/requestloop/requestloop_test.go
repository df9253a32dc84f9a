package requestloop

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// failingTimes answers every try but the first n.
func failingTimes(n int32) func(context.Context) error {
	var tries atomic.Int32
	return func(context.Context) error {
		if tries.Add(1) <= n {
			return errors.New("unreachable")
		}
		return nil
	}
}

// A retrying loop turns failed tries into retries of one answered request; a loop that does not retry counts each as
// a failed request. Both see the target unreachable for a while.
func TestARetryingLoopCountsFailedTriesAsRetriesAndTheOtherAsFailures(t *testing.T) {
	g := NewWithT(t)
	retrying := Run(failingTimes(3), time.Millisecond, time.Hour)
	plain := Run(failingTimes(3), time.Millisecond, 0)
	g.Eventually(func() int { return retrying.Succeeded() }).Should(BeNumerically(">=", 2))
	g.Eventually(func() int { return plain.Succeeded() }).Should(BeNumerically(">=", 2))
	g.Expect(retrying.Answering(time.Minute)).To(BeTrue())

	r := retrying.Take()
	g.Expect(r.Failures).To(BeEmpty())
	g.Expect(r.Retried).To(Equal(3))
	g.Expect(r.LongestUnreachable).To(BeNumerically(">", 0))
	p := plain.Take()
	g.Expect(p.Failures).To(HaveLen(3))
	g.Expect(p.Retried).To(BeZero())
	g.Expect(p.Failures[0].LastOK).To(Equal(p.Failures[2].LastOK), "one run of consecutive failures")
	g.Expect(p.LongestUnreachable).To(BeNumerically(">=", p.Failures[2].At.Sub(p.Failures[0].LastOK)))

	// Take starts a new span: nothing failed since.
	_, failures := plain.Stop()
	g.Expect(failures).To(BeEmpty())
	retrying.Stop()
}

// A request that never gets an answer within retryFor is one failure, and the run still going counts as unreachable
// until the figures are taken.
func TestARequestThatOutlastsItsRetriesFailsOnce(t *testing.T) {
	g := NewWithT(t)
	down := Run(func(context.Context) error { return errors.New("down") }, time.Millisecond, 20*time.Millisecond)
	g.Eventually(func() int {
		down.mu.Lock()
		defer down.mu.Unlock()
		return len(down.phase.Failures)
	}).Should(BeNumerically(">=", 1))
	g.Expect(down.Answering(time.Minute)).To(BeFalse())
	g.Expect(down.LastError()).To(Equal("down"), "what a waiting test reports")
	ok, failures := down.Stop()
	g.Expect(ok).To(BeZero())
	g.Expect(failures[0].Err).To(Equal("down"))
}
