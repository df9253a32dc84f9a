package agent

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestLandingsRetryAtOnceOnDuplicatesThenBackOff(t *testing.T) {
	g := NewWithT(t)
	bo := &backoff{min: 100 * time.Millisecond, max: 5 * time.Second}
	l := landings{bo: bo}
	for i := range duplicateTries * 3 {
		g.Expect(l.duplicate(3)).To(Equal(100*time.Millisecond), "duplicate %d of three servers' share", i+1)
	}
	g.Expect(l.duplicate(3)).To(BeNumerically(">=", 80*time.Millisecond), "then the backoff: its first wait")
	second := l.duplicate(3)
	g.Expect(second).To(BeNumerically(">=", 160*time.Millisecond), "and it grows")
	g.Expect(second).To(BeNumerically("<=", 240*time.Millisecond))

	l.reached()
	bo.reset()
	g.Expect(l.duplicate(3)).To(Equal(100*time.Millisecond), "a server reached starts the count over")
	g.Expect(l.duplicate(0)).To(Equal(100*time.Millisecond), "a server count of zero counts as one")
}
