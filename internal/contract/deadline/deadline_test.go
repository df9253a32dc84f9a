package deadline

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestDeadline(t *testing.T) {
	g := NewWithT(t)
	var d Deadline
	g.Expect(d.Expired()).To(BeFalse(), "the zero value has no deadline")

	d.Set(time.Now().Add(-time.Second))
	g.Expect(d.Expired()).To(BeTrue(), "a deadline in the past has passed at once")

	d.Set(time.Time{})
	g.Expect(d.Expired()).To(BeFalse(), "clearing it gives a fresh, open channel")

	d.Set(time.Now().Add(20 * time.Millisecond))
	g.Expect(d.Expired()).To(BeFalse())
	g.Eventually(d.Wait()).WithTimeout(5*time.Second).Should(BeClosed(), "a future deadline fires by itself")

	d.Set(time.Now().Add(time.Hour))
	wait := d.Wait()
	d.Set(time.Now().Add(-time.Second))
	g.Expect(wait).To(BeClosed(), "moving it into the past releases a waiter that took the channel before")
}
