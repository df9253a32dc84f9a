package certs

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/url"
	"time"
)

// Usage is an extended key usage of a leaf certificate, named as in
// cert-manager and the Kubernetes CSR API.
type Usage string

const (
	UsageServerAuth Usage = "server auth"
	UsageClientAuth Usage = "client auth"
)

// defaultUsages applies when a LeafSpec lists none: proxy components talk
// mTLS in both directions, so a leaf is usually both server and client.
var defaultUsages = []Usage{UsageServerAuth, UsageClientAuth}

var extKeyUsages = map[Usage]x509.ExtKeyUsage{
	UsageServerAuth: x509.ExtKeyUsageServerAuth,
	UsageClientAuth: x509.ExtKeyUsageClientAuth,
}

// LeafSpec is what a leaf certificate must contain.
type LeafSpec struct {
	CommonName    string
	Organizations []string
	DNSNames      []string
	IPAddresses   []net.IP
	// URIs are URI SANs: the ProxyCertificate controller writes one into each client certificate (a role of the
	// operator's, or the ProxyCertificate it came from); nothing else may ask for one.
	URIs     []*url.URL
	Usages   []Usage       // ext key usages; empty means server auth + client auth
	Duration time.Duration // lifetime
}

// effectiveUsages returns the spec's usages with the default applied.
func (s LeafSpec) effectiveUsages() []Usage {
	if len(s.Usages) == 0 {
		return defaultUsages
	}
	return s.Usages
}

// extKeyUsages maps the spec's usages, keeping their order and dropping
// duplicates; an unknown usage is an error rather than silently ignored.
func (s LeafSpec) extKeyUsages() ([]x509.ExtKeyUsage, error) {
	var out []x509.ExtKeyUsage
	seen := map[Usage]bool{}
	for _, u := range s.effectiveUsages() {
		eku, ok := extKeyUsages[u]
		if !ok {
			return nil, fmt.Errorf("unsupported usage %q", u)
		}
		if !seen[u] {
			seen[u] = true
			out = append(out, eku)
		}
	}
	return out, nil
}

// IssueLeaf creates a new ECDSA P-256 key and a leaf signed by ca.
// NotBefore = now - 1 minute, NotAfter = now + Duration but never after the
// CA's NotAfter (a leaf outliving its issuer could not be verified anyway),
// KeyUsage DigitalSignature|KeyEncipherment, ExtKeyUsage from Usages,
// AuthorityKeyId = the CA's SubjectKeyId, random serial. CertPEM holds only
// the leaf; callers append intermediates (such as a cross-signed CA) when
// they build tls.crt.
func IssueLeaf(ca *KeyPair, spec LeafSpec, now time.Time) (*KeyPair, error) {
	if err := checkSigningCA(ca); err != nil {
		return nil, fmt.Errorf("issue leaf: %w", err)
	}
	template, err := leafTemplate(ca.Cert, spec, now)
	if err != nil {
		return nil, fmt.Errorf("issue leaf %q: %w", spec.CommonName, err)
	}
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("issue leaf %q: %w", spec.CommonName, err)
	}
	if template.SubjectKeyId, err = subjectKeyID(key.Public()); err != nil {
		return nil, fmt.Errorf("issue leaf %q: %w", spec.CommonName, err)
	}
	kp, err := newKeyPair(template, ca.Cert, key, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issue leaf %q: %w", spec.CommonName, err)
	}
	return kp, nil
}

// leafTemplate validates spec and turns it into a certificate template.
func leafTemplate(ca *x509.Certificate, spec LeafSpec, now time.Time) (*x509.Certificate, error) {
	if spec.Duration <= 0 {
		return nil, fmt.Errorf("duration must be positive, got %s", spec.Duration)
	}
	if spec.CommonName == "" && len(spec.DNSNames) == 0 && len(spec.IPAddresses) == 0 {
		return nil, errors.New("a common name, DNS name or IP address is required")
	}
	if !now.Before(ca.NotAfter) {
		return nil, fmt.Errorf("CA expired at %s", ca.NotAfter.UTC().Format(time.RFC3339))
	}
	ekus, err := spec.extKeyUsages()
	if err != nil {
		return nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   spec.CommonName,
			Organization: spec.Organizations,
		},
		DNSNames:    spec.DNSNames,
		IPAddresses: spec.IPAddresses,
		URIs:        spec.URIs,
		NotBefore:   now.Add(-clockSkew),
		NotAfter:    minTime(now.Add(spec.Duration), ca.NotAfter),
		// KeyEncipherment is meaningless for ECDSA keys but kept because
		// some verifiers still expect it on TLS server certificates.
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           ekus,
		BasicConstraintsValid: true,
		IsCA:                  false,
		// crypto/x509 takes the AKID from the parent's SubjectKeyId anyway;
		// setting it documents the intent and covers parents without one.
		AuthorityKeyId: ca.SubjectKeyId,
	}, nil
}
