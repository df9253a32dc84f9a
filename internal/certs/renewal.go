package certs

import (
	"crypto/x509"
	"net"
	"net/url"
	"strconv"
	"time"
)

// RenewalTime returns when a certificate valid from notBefore to notAfter
// should be renewed: renewBefore ahead of expiry when that is a meaningful
// window (positive and shorter than the lifetime), otherwise after 2/3 of
// the lifetime, which leaves a third of it to retry failed renewals.
func RenewalTime(notBefore, notAfter time.Time, renewBefore time.Duration) time.Time {
	lifetime := notAfter.Sub(notBefore)
	if renewBefore > 0 && renewBefore < lifetime {
		return notAfter.Add(-renewBefore)
	}
	// Divide first so very long lifetimes cannot overflow time.Duration.
	return notBefore.Add(lifetime / 3 * 2)
}

// IssueReason says why a leaf must be (re)issued; "" means it is fine.
type IssueReason string

const (
	ReasonMissing         IssueReason = "DoesNotExist"       // no cert or unparseable cert/key
	ReasonKeyMismatch     IssueReason = "KeyMismatch"        // tls.key is not the key of the leaf
	ReasonExpired         IssueReason = "Expired"            // now >= NotAfter
	ReasonRenewalDue      IssueReason = "RenewalTimeReached" // now >= RenewalTime
	ReasonSANsChanged     IssueReason = "SANsChanged"        // DNS names or IPs differ as SETS (order-insensitive)
	ReasonUsagesChanged   IssueReason = "UsagesChanged"      // ext key usages differ as sets
	ReasonSubjectChanged  IssueReason = "SubjectChanged"     // CN or Organizations (set) differ
	ReasonIssuerChanged   IssueReason = "IssuerChanged"      // leaf not signed by the current CA
	ReasonDurationChanged IssueReason = "DurationChanged"    // lifetime differs from spec.Duration (unless capped by the CA)
)

// durationTolerance absorbs the truncation of certificate times to whole
// seconds when comparing a leaf's lifetime with its spec.
const durationTolerance = time.Minute

// NeedsIssue checks an existing leaf (tls.crt PEM, which may contain the leaf
// followed by intermediates, and tls.key PEM) against spec and the current CA
// at now. It returns the first applicable reason in this order: Missing,
// KeyMismatch, Expired, IssuerChanged, SubjectChanged, SANsChanged,
// UsagesChanged, DurationChanged, RenewalDue; "" if none applies. It also
// returns the parsed leaf, nil when Missing.
//
// A nil ca yields IssuerChanged: without a current CA we cannot show the leaf
// is trusted, and reissuing is the safe answer.
func NeedsIssue(tlsCrt, tlsKey []byte, spec LeafSpec, renewBefore time.Duration, ca *x509.Certificate, now time.Time) (IssueReason, *x509.Certificate) {
	certs, err := ParseCertificates(tlsCrt)
	if err != nil {
		return ReasonMissing, nil
	}
	key, err := parsePrivateKey(tlsKey)
	if err != nil {
		return ReasonMissing, nil
	}
	leaf := certs[0]
	return leafReason(leaf, key.Public(), spec, renewBefore, ca, now), leaf
}

// leafReason runs the checks after parsing; the order is part of the
// contract (cheap and decisive problems first, scheduled renewal last).
func leafReason(leaf *x509.Certificate, pub any, spec LeafSpec, renewBefore time.Duration, ca *x509.Certificate, now time.Time) IssueReason {
	switch {
	case !publicKeysEqual(pub, leaf.PublicKey):
		return ReasonKeyMismatch
	case !now.Before(leaf.NotAfter):
		return ReasonExpired
	case ca == nil || leaf.CheckSignatureFrom(ca) != nil:
		return ReasonIssuerChanged
	case !subjectMatches(leaf, spec):
		return ReasonSubjectChanged
	case !sansMatch(leaf, spec):
		return ReasonSANsChanged
	case !sameSet(leafUsages(leaf), usageStrings(spec.effectiveUsages())):
		return ReasonUsagesChanged
	case !durationMatches(leaf, spec, ca):
		return ReasonDurationChanged
	case !now.Before(RenewalTime(leaf.NotBefore, leaf.NotAfter, renewBefore)):
		return ReasonRenewalDue
	}
	return ""
}

func subjectMatches(leaf *x509.Certificate, spec LeafSpec) bool {
	return leaf.Subject.CommonName == spec.CommonName &&
		sameSet(leaf.Subject.Organization, spec.Organizations)
}

func sansMatch(leaf *x509.Certificate, spec LeafSpec) bool {
	return sameSet(leaf.DNSNames, spec.DNSNames) &&
		sameSet(ipStrings(leaf.IPAddresses), ipStrings(spec.IPAddresses)) &&
		sameSet(uriStrings(leaf.URIs), uriStrings(spec.URIs))
}

// durationMatches compares the leaf's lifetime with what IssueLeaf would
// produce (Duration plus the clock-skew minute). A shorter leaf is fine when
// it ends where the CA ends: IssueLeaf capped it, and reissuing under the
// same CA would only produce the same cap again.
func durationMatches(leaf *x509.Certificate, spec LeafSpec, ca *x509.Certificate) bool {
	actual := leaf.NotAfter.Sub(leaf.NotBefore)
	expected := spec.Duration + clockSkew
	diff := actual - expected
	if diff >= -durationTolerance && diff <= durationTolerance {
		return true
	}
	capped := actual < expected && !leaf.NotAfter.Before(ca.NotAfter.Add(-time.Second))
	return capped
}

// ipStrings normalises IPs to their text form so that the 4- and 16-byte
// encodings of the same IPv4 address compare equal.
func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func uriStrings(uris []*url.URL) []string {
	out := make([]string, 0, len(uris))
	for _, u := range uris {
		out = append(out, u.String())
	}
	return out
}

func usageStrings(usages []Usage) []string {
	out := make([]string, 0, len(usages))
	for _, u := range usages {
		out = append(out, string(u))
	}
	return out
}

// leafUsages names the leaf's ext key usages like Usage values. Usages this
// package never issues get names no spec can match, so their presence is
// reported as a change instead of being ignored.
func leafUsages(leaf *x509.Certificate) []string {
	var out []string
	for _, eku := range leaf.ExtKeyUsage {
		out = append(out, ekuName(eku))
	}
	for _, oid := range leaf.UnknownExtKeyUsage {
		out = append(out, "oid:"+oid.String())
	}
	return out
}

func ekuName(eku x509.ExtKeyUsage) string {
	for usage, known := range extKeyUsages {
		if known == eku {
			return string(usage)
		}
	}
	return "eku:" + strconv.Itoa(int(eku))
}

// sameSet reports whether a and b hold the same strings, ignoring order and
// duplicates.
func sameSet(a, b []string) bool {
	setA, setB := toSet(a), toSet(b)
	if len(setA) != len(setB) {
		return false
	}
	for s := range setA {
		if !setB[s] {
			return false
		}
	}
	return true
}

func toSet(items []string) map[string]bool {
	set := make(map[string]bool, len(items))
	for _, s := range items {
		set[s] = true
	}
	return set
}
