package certs

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"
)

// NewCA creates a self-signed CA (ECDSA P-256), CN=commonName, IsCA,
// KeyUsageCertSign|CRLSign|DigitalSignature, NotBefore = now - 1 minute,
// NotAfter = now + validity, a random 128-bit serial and SubjectKeyId set.
//
// The subject also carries the certificate serial (hex) as its serialNumber
// attribute. During a rotation the old and new CA share the same common name;
// without a distinguishing attribute their subjects would be byte-identical,
// and verifiers (and TLS peers filtering client certificates by the
// certificate_authorities list, which is matched by subject) could not tell
// which CA issued a certificate. The serial is already unique per CA, so
// reusing it avoids inventing a second random value.
func NewCA(commonName string, validity time.Duration, now time.Time) (*KeyPair, error) {
	if commonName == "" {
		return nil, errors.New("new CA: common name must not be empty")
	}
	if validity <= 0 {
		return nil, fmt.Errorf("new CA: validity must be positive, got %s", validity)
	}
	key, err := newKey()
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	skid, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, fmt.Errorf("new CA: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   commonName,
			SerialNumber: serial.Text(16),
		},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// No path length limit: after a rotation the next CA is also served
		// as an intermediate under the previous one (see CrossSign), which a
		// MaxPathLen of 0 would forbid.
		SubjectKeyId: skid,
	}
	kp, err := newKeyPair(template, template, key, key)
	if err != nil {
		return nil, fmt.Errorf("new CA %q: %w", commonName, err)
	}
	return kp, nil
}

// ParseCA parses a CA from PEM cert + key, as a user would put them in a
// Secret's ca.crt / ca.key. If ca.crt contains several certificates the first
// one is the CA; the returned CertPEM holds only that one. Errors name the
// offending Secret key so users know what to fix.
func ParseCA(certPEM, keyPEM []byte) (*KeyPair, error) {
	cert, err := parseCACert(certPEM)
	if err != nil {
		return nil, err
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ca.key: %w", err)
	}
	if !publicKeysEqual(key.Public(), cert.PublicKey) {
		return nil, errors.New("ca.key does not match ca.crt")
	}
	keyOut, err := encodeKeyPEM(key)
	if err != nil {
		return nil, fmt.Errorf("ca.key: %w", err)
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: encodeCertPEM(cert), KeyPEM: keyOut}, nil
}

// parseCACert returns the first certificate of ca.crt after checking that it
// can act as a CA.
func parseCACert(certPEM []byte) (*x509.Certificate, error) {
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("ca.crt: %w", err)
	}
	if err := checkIsCA(certs[0]); err != nil {
		return nil, fmt.Errorf("ca.crt: %w", err)
	}
	return certs[0], nil
}

// CrossSign returns a certificate with next's subject, public key,
// SubjectKeyId and validity (NotAfter capped at prev's NotAfter), issued by
// prev, with IsCA true. Served as an intermediate after a leaf issued by
// next, it lets peers that still trust only prev verify that leaf. The second
// return value is the certificate as a single PEM block.
//
// now is only used to refuse producing a certificate that would already be
// expired, which happens when prev has expired: a cross-signature is useless
// then and the caller should know.
func CrossSign(next, prev *KeyPair, now time.Time) (*x509.Certificate, []byte, error) {
	if next == nil || next.Cert == nil {
		return nil, nil, errors.New("cross-sign: next CA certificate is required")
	}
	if err := checkIsCA(next.Cert); err != nil {
		return nil, nil, fmt.Errorf("cross-sign: next CA: %w", err)
	}
	if err := checkSigningCA(prev); err != nil {
		return nil, nil, fmt.Errorf("cross-sign: previous CA: %w", err)
	}
	template, err := crossSignTemplate(next.Cert, prev.Cert, now)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-sign: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, template, prev.Cert, next.Cert.PublicKey, prev.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-sign: create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-sign: parse created certificate: %w", err)
	}
	return cert, encodeCertPEM(cert), nil
}

// crossSignTemplate copies what identifies next as an issuer. The subject is
// copied as raw bytes: chain building matches an issuer to its certificates
// by exact subject bytes and key identifier, so re-encoding the subject
// (which could change string types of a user-supplied CA) must be avoided.
func crossSignTemplate(next, prev *x509.Certificate, now time.Time) (*x509.Certificate, error) {
	notAfter := minTime(next.NotAfter, prev.NotAfter)
	if !now.Before(notAfter) {
		return nil, fmt.Errorf("previous CA or next CA expired at %s", notAfter.UTC().Format(time.RFC3339))
	}
	if !next.NotBefore.Before(notAfter) {
		return nil, errors.New("next CA becomes valid only after the previous CA expires")
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	skid := next.SubjectKeyId
	if len(skid) == 0 {
		// A user-supplied CA may lack one. crypto/x509 would derive one
		// anyway; doing it here keeps the value independent of GODEBUG.
		if skid, err = subjectKeyID(next.PublicKey); err != nil {
			return nil, err
		}
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		RawSubject:            next.RawSubject,
		NotBefore:             next.NotBefore,
		NotAfter:              notAfter,
		KeyUsage:              next.KeyUsage,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            next.MaxPathLen,
		MaxPathLenZero:        next.MaxPathLenZero,
		SubjectKeyId:          skid,
	}, nil
}

// CANeedsRotation reports whether 2/3 of the CA's lifetime has passed at now.
// A nil CA needs rotation (there is nothing usable to keep).
func CANeedsRotation(ca *x509.Certificate, now time.Time) bool {
	if ca == nil {
		return true
	}
	return !now.Before(RenewalTime(ca.NotBefore, ca.NotAfter, 0))
}
