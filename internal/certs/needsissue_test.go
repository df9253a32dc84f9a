package certs

import (
	"crypto/x509"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestNeedsIssue(t *testing.T) {
	ca := mustCA(t, "test-ca", 365*day, t0)
	// Same CN as ca: IssuerChanged must come from the signature, not the name.
	otherCA := mustCA(t, "test-ca", 365*day, t0)
	// A CA that ends before a 30-day leaf would, so leaves get capped.
	shortCA := mustCA(t, "short-ca", 10*day, t0)

	spec := LeafSpec{
		CommonName:    "proxy",
		Organizations: []string{"org-a", "org-b"},
		DNSNames:      []string{"a.example", "b.example"},
		IPAddresses:   []net.IP{net.ParseIP("10.0.0.1").To4(), net.ParseIP("::1")},
		Duration:      30 * day,
	}
	leaf := mustLeaf(t, ca, spec, t0)
	otherKey := mustLeaf(t, ca, spec, t0).KeyPEM
	capped := mustLeaf(t, shortCA, spec, t0)
	renewAt := RenewalTime(leaf.Cert.NotBefore, leaf.Cert.NotAfter, 0)

	with := func(change func(*LeafSpec)) LeafSpec {
		s := spec
		change(&s)
		return s
	}

	tests := []struct {
		name        string
		crt, key    []byte
		spec        LeafSpec
		renewBefore time.Duration
		ca          *x509.Certificate
		now         time.Time
		want        IssueReason
	}{
		{name: "fine", spec: spec, now: t0.Add(time.Hour)},
		{name: "SANs in another order is fine", now: t0.Add(time.Hour), spec: with(func(s *LeafSpec) {
			s.DNSNames = []string{"b.example", "a.example", "a.example"}
			// 16-byte form of the IPv4 address must compare equal to the 4-byte one.
			s.IPAddresses = []net.IP{net.ParseIP("::1"), net.ParseIP("10.0.0.1")}
		})},
		{name: "organizations in another order and explicit default usages is fine", now: t0.Add(time.Hour), spec: with(func(s *LeafSpec) {
			s.Organizations = []string{"org-b", "org-a"}
			s.Usages = []Usage{UsageClientAuth, UsageServerAuth}
		})},
		{name: "leaf followed by intermediates is fine", crt: concat(leaf.CertPEM, otherCA.CertPEM), spec: spec, now: t0.Add(time.Hour)},
		{name: "leaf capped by the CA is fine", crt: capped.CertPEM, key: capped.KeyPEM, ca: shortCA.Cert, spec: spec, now: t0.Add(time.Hour)},
		{name: "capped leaf is longer than a shortened duration", crt: capped.CertPEM, key: capped.KeyPEM, ca: shortCA.Cert, now: t0.Add(time.Hour),
			spec: with(func(s *LeafSpec) { s.Duration = 5 * day }), want: ReasonDurationChanged},
		{name: "just before renewal time is fine", spec: spec, now: renewAt.Add(-time.Second)},

		{name: "missing: empty tls.crt", crt: []byte{}, spec: spec, now: t0, want: ReasonMissing},
		{name: "missing: garbage tls.crt", crt: []byte("not a cert"), spec: spec, now: t0, want: ReasonMissing},
		{name: "missing: empty tls.key", key: []byte{}, spec: spec, now: t0, want: ReasonMissing},
		{name: "missing: garbage tls.key", key: []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), spec: spec, now: t0, want: ReasonMissing},
		{name: "key mismatch", key: otherKey, spec: spec, now: t0.Add(time.Hour), want: ReasonKeyMismatch},
		{name: "key mismatch is reported before expiry", key: otherKey, spec: spec, now: leaf.Cert.NotAfter, want: ReasonKeyMismatch},
		{name: "expired at NotAfter", spec: spec, now: leaf.Cert.NotAfter, want: ReasonExpired},
		{name: "expired is reported before issuer change", ca: otherCA.Cert, spec: spec, now: leaf.Cert.NotAfter.Add(time.Hour), want: ReasonExpired},
		{name: "issuer changed (same CA name, different key)", ca: otherCA.Cert, spec: spec, now: t0.Add(time.Hour), want: ReasonIssuerChanged},
		{name: "issuer changed is reported before subject change", ca: otherCA.Cert, now: t0.Add(time.Hour), want: ReasonIssuerChanged,
			spec: with(func(s *LeafSpec) { s.CommonName = "renamed" })},
		{name: "subject common name changed", now: t0.Add(time.Hour), want: ReasonSubjectChanged,
			spec: with(func(s *LeafSpec) { s.CommonName = "renamed" })},
		{name: "subject organizations changed", now: t0.Add(time.Hour), want: ReasonSubjectChanged,
			spec: with(func(s *LeafSpec) { s.Organizations = []string{"org-a"} })},
		{name: "subject change is reported before SANs change", now: t0.Add(time.Hour), want: ReasonSubjectChanged,
			spec: with(func(s *LeafSpec) { s.CommonName = "renamed"; s.DNSNames = nil })},
		{name: "SANs changed: DNS name added", now: t0.Add(time.Hour), want: ReasonSANsChanged,
			spec: with(func(s *LeafSpec) { s.DNSNames = []string{"a.example", "b.example", "c.example"} })},
		{name: "SANs changed: IP replaced", now: t0.Add(time.Hour), want: ReasonSANsChanged,
			spec: with(func(s *LeafSpec) { s.IPAddresses = []net.IP{net.ParseIP("10.0.0.2"), net.ParseIP("::1")} })},
		{name: "SANs change is reported before usages change", now: t0.Add(time.Hour), want: ReasonSANsChanged,
			spec: with(func(s *LeafSpec) { s.DNSNames = nil; s.Usages = []Usage{UsageServerAuth} })},
		{name: "usages changed", now: t0.Add(time.Hour), want: ReasonUsagesChanged,
			spec: with(func(s *LeafSpec) { s.Usages = []Usage{UsageServerAuth} })},
		{name: "usages change is reported before duration change", now: t0.Add(time.Hour), want: ReasonUsagesChanged,
			spec: with(func(s *LeafSpec) { s.Usages = []Usage{UsageClientAuth}; s.Duration = 60 * day })},
		{name: "duration changed", now: t0.Add(time.Hour), want: ReasonDurationChanged,
			spec: with(func(s *LeafSpec) { s.Duration = 60 * day })},
		{name: "duration within a minute of the spec is fine", now: t0.Add(time.Hour),
			spec: with(func(s *LeafSpec) { s.Duration = 30*day - 30*time.Second })},
		{name: "duration over a minute shorter than the spec", now: t0.Add(time.Hour), want: ReasonDurationChanged,
			spec: with(func(s *LeafSpec) { s.Duration = 30*day + 61*time.Second })},
		{name: "duration over a minute longer than the spec", now: t0.Add(time.Hour), want: ReasonDurationChanged,
			spec: with(func(s *LeafSpec) { s.Duration = 30*day - 61*time.Second })},
		{name: "duration shortened", now: t0.Add(time.Hour), want: ReasonDurationChanged,
			spec: with(func(s *LeafSpec) { s.Duration = 29 * day })},
		{name: "duration change is reported before renewal", now: renewAt, want: ReasonDurationChanged,
			spec: with(func(s *LeafSpec) { s.Duration = 60 * day })},
		{name: "renewal due at 2/3 of the lifetime", spec: spec, now: renewAt, want: ReasonRenewalDue},
		{name: "renewal due renewBefore ahead of expiry", spec: spec, renewBefore: 5 * day,
			now: leaf.Cert.NotAfter.Add(-5 * day), want: ReasonRenewalDue},
		{name: "renewBefore postpones the default renewal time", spec: spec, renewBefore: 5 * day, now: renewAt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			crt, key, issuer := tt.crt, tt.key, tt.ca
			if crt == nil {
				crt = leaf.CertPEM
			}
			if key == nil {
				key = leaf.KeyPEM
			}
			if issuer == nil {
				issuer = ca.Cert
			}

			reason, got := NeedsIssue(crt, key, tt.spec, tt.renewBefore, issuer, tt.now)

			g.Expect(reason).To(Equal(tt.want))
			if tt.want == ReasonMissing {
				g.Expect(got).To(BeNil())
				return
			}
			wantLeaf, _ := ParseCertificates(crt)
			g.Expect(got).NotTo(BeNil())
			g.Expect(got.Raw).To(Equal(wantLeaf[0].Raw), "the first certificate of tls.crt is the leaf")
		})
	}
}

func TestNeedsIssueWithoutCAReportsIssuerChanged(t *testing.T) {
	g := NewWithT(t)
	ca := mustCA(t, "test-ca", 365*day, t0)
	spec := LeafSpec{CommonName: "proxy", Duration: day}
	leaf := mustLeaf(t, ca, spec, t0)

	reason, got := NeedsIssue(leaf.CertPEM, leaf.KeyPEM, spec, 0, nil, t0)

	g.Expect(reason).To(Equal(ReasonIssuerChanged))
	g.Expect(got.Raw).To(Equal(leaf.Cert.Raw))
}

func TestNeedsIssueAcceptsFreshlyIssuedLeavesForEveryUsage(t *testing.T) {
	ca := mustCA(t, "test-ca", 365*day, t0)
	for _, usages := range [][]Usage{nil, {UsageServerAuth}, {UsageClientAuth}, {UsageServerAuth, UsageClientAuth}} {
		spec := LeafSpec{CommonName: "proxy", Usages: usages, Duration: day}
		leaf := mustLeaf(t, ca, spec, t0)
		reason, _ := NeedsIssue(leaf.CertPEM, leaf.KeyPEM, spec, 0, ca.Cert, t0)
		NewWithT(t).Expect(reason).To(BeEmpty(), "usages %v", usages)
	}
}
