package certs

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestRenewalTime(t *testing.T) {
	notBefore := t0
	notAfter := t0.Add(90 * day)

	tests := []struct {
		name        string
		renewBefore time.Duration
		want        time.Time
	}{
		{name: "default is 2/3 of the lifetime", renewBefore: 0, want: t0.Add(60 * day)},
		{name: "negative renewBefore means default", renewBefore: -time.Hour, want: t0.Add(60 * day)},
		{name: "explicit renewBefore", renewBefore: 10 * day, want: notAfter.Add(-10 * day)},
		{name: "renewBefore just under the lifetime", renewBefore: 90*day - time.Second, want: t0.Add(time.Second)},
		{name: "renewBefore equal to the lifetime falls back to 2/3", renewBefore: 90 * day, want: t0.Add(60 * day)},
		{name: "renewBefore longer than the lifetime falls back to 2/3", renewBefore: 365 * day, want: t0.Add(60 * day)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(RenewalTime(notBefore, notAfter, tt.renewBefore)).To(BeTemporally("==", tt.want))
		})
	}
}

func TestRenewalTimeHandlesVeryLongLifetimes(t *testing.T) {
	// 250 years: lifetime*2 would overflow time.Duration.
	notAfter := t0.Add(250 * 365 * day)
	got := RenewalTime(t0, notAfter, 0)
	NewWithT(t).Expect(got).To(BeTemporally("~", t0.Add(250*365*day/3*2), time.Second))
}

func TestCANeedsRotation(t *testing.T) {
	g := NewWithT(t)
	ca := mustCA(t, "test-ca", 300*day, t0)
	rotateAt := RenewalTime(ca.Cert.NotBefore, ca.Cert.NotAfter, 0)
	// Sanity: 2/3 of 300 days (+1 minute skew allowance) after t0-1m.
	g.Expect(rotateAt).To(BeTemporally("~", t0.Add(200*day), time.Minute))

	g.Expect(CANeedsRotation(ca.Cert, t0)).To(BeFalse())
	g.Expect(CANeedsRotation(ca.Cert, rotateAt.Add(-time.Second))).To(BeFalse())
	g.Expect(CANeedsRotation(ca.Cert, rotateAt)).To(BeTrue())
	g.Expect(CANeedsRotation(ca.Cert, ca.Cert.NotAfter.Add(day))).To(BeTrue())
	g.Expect(CANeedsRotation(nil, t0)).To(BeTrue())
}
