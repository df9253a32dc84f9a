package managedproxyconfiguration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestThePreviousCAStaysForTheRolloverGraceAfterItsLastUse(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	unusedSince := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		previousCAUnusedAnnotation: now.Add(-10 * time.Second).Format(time.RFC3339)}}}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	for _, c := range []struct {
		name  string
		grace time.Duration
		left  time.Duration
	}{
		{"the default, without a grace set", 0, CARolloverGrace - 10*time.Second},
		{"the grace set (--ca-rollover-grace)", 45 * time.Second, 35 * time.Second},
		{"a grace already over", 5 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now), RolloverGrace: c.grace}
			left, err := r.previousCAGrace(context.Background(), mpc, unusedSince)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(left).To(Equal(c.left))
		})
	}
}
