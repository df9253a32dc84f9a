package certs

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
)

// errNoCertificate is returned by ParseCertificates when the input holds no
// CERTIFICATE block at all (empty, garbage, or only keys).
var errNoCertificate = errors.New("no PEM certificate found")

// Fingerprint is "SHA256:" + lowercase hex of sha256(cert.Raw). It is meant
// for status fields and events, where a short stable identifier is more
// useful than a serial number. A nil certificate has an empty fingerprint.
func Fingerprint(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	sum := sha256.Sum256(cert.Raw)
	return "SHA256:" + hex.EncodeToString(sum[:])
}

// ParseCertificates parses every CERTIFICATE block of a PEM blob, in order.
// Other block types (for example a key stored alongside) are skipped, but a
// CERTIFICATE block that does not parse is an error: silently dropping it
// could hide a broken bundle.
func ParseCertificates(pemData []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for block, rest := pem.Decode(pemData); block != nil; block, rest = pem.Decode(rest) {
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate #%d: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
	}
	if len(certs) == 0 {
		return nil, errNoCertificate
	}
	return certs, nil
}

// EncodeBundle PEM-encodes certs in the given order, dropping duplicates
// (same Raw) and nil entries. Order matters to callers: a bundle lists the
// current CA first, and a tls.crt lists the leaf before its intermediates.
func EncodeBundle(certs ...*x509.Certificate) []byte {
	var buf bytes.Buffer
	seen := map[string]bool{}
	for _, cert := range certs {
		if cert == nil || seen[string(cert.Raw)] {
			continue
		}
		seen[string(cert.Raw)] = true
		buf.Write(encodeCertPEM(cert))
	}
	return buf.Bytes()
}
