package certs

import (
	"bytes"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// csrBlockType is the PEM block type of a PKCS#10 certificate request, as
// written by OCM's klusterlet and required by the Kubernetes CSR API.
const csrBlockType = "CERTIFICATE REQUEST"

// DefaultLeafDuration is the lifetime of every leaf certificate the operator
// issues unless one is asked for: the hub's ProxyCertificates (their CRD's
// default spec.duration, 4320h), the agents' from their CSRs, and a CSR signed
// here without a duration. 180 days, as the existing addon's.
const DefaultLeafDuration = 180 * 24 * time.Hour

// ParseCSR decodes the first PEM block of csrPEM, which must be a
// CERTIFICATE REQUEST, and parses it. Like the Kubernetes CSR API it ignores
// anything after that block. It does not check the request's signature; see
// (*x509.CertificateRequest).CheckSignature.
func ParseCSR(csrPEM []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		return nil, errors.New("no PEM block found")
	}
	if block.Type != csrBlockType {
		return nil, fmt.Errorf("PEM block type is %q, want %q", block.Type, csrBlockType)
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse certificate request: %w", err)
	}
	return req, nil
}

// SignCSR signs a PEM CSR (already reviewed) with ca: subject and public key
// copied from the request, KeyUsage DigitalSignature|KeyEncipherment,
// ExtKeyUsage ClientAuth only, NotBefore = now - 1 minute, NotAfter = now +
// duration capped at ca.Cert.NotAfter, random serial, AuthorityKeyId from the
// CA. duration <= 0 means DefaultLeafDuration. Returns the PEM of the certificate
// followed by intermediates (the caller passes them, may be nil) — OCM's
// klusterlet writes status.certificate as tls.crt, so a chain works.
//
// Only the subject and the public key are taken from the request: requested
// extensions (SANs, key usages, basic constraints) are never copied. The
// subject is copied as raw bytes so the certificate carries exactly the
// subject that was reviewed. The request's signature is checked again, and
// intermediates must be PEM certificates: other blocks (such as a key pasted
// by mistake) are dropped rather than published.
func SignCSR(ca *KeyPair, csrPEM []byte, duration time.Duration, intermediates []byte, now time.Time) ([]byte, error) {
	if err := checkSigningCA(ca); err != nil {
		return nil, fmt.Errorf("sign CSR: %w", err)
	}
	req, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, fmt.Errorf("sign CSR: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("sign CSR: check request signature: %w", err)
	}
	var chain []*x509.Certificate
	if len(bytes.TrimSpace(intermediates)) > 0 {
		if chain, err = ParseCertificates(intermediates); err != nil {
			return nil, fmt.Errorf("sign CSR: intermediates: %w", err)
		}
	}
	template, err := csrTemplate(ca.Cert, req, duration, now)
	if err != nil {
		return nil, fmt.Errorf("sign CSR: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.Cert, req.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("sign CSR: create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("sign CSR: parse created certificate: %w", err)
	}
	return EncodeBundle(append([]*x509.Certificate{cert}, chain...)...), nil
}

// csrTemplate builds the client certificate template for req under ca.
func csrTemplate(ca *x509.Certificate, req *x509.CertificateRequest, duration time.Duration, now time.Time) (*x509.Certificate, error) {
	if duration <= 0 {
		duration = DefaultLeafDuration
	}
	if !now.Before(ca.NotAfter) {
		return nil, fmt.Errorf("CA expired at %s", ca.NotAfter.UTC().Format(time.RFC3339))
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	skid, err := subjectKeyID(req.PublicKey)
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber: serial,
		RawSubject:   req.RawSubject,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     minTime(now.Add(duration), ca.NotAfter),
		// Same key usage as IssueLeaf; KeyEncipherment only matters for RSA
		// keys but is harmless for the others.
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		SubjectKeyId:          skid,
		AuthorityKeyId:        ca.SubjectKeyId,
	}, nil
}
