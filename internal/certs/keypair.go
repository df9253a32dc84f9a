package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	"k8s.io/client-go/util/keyutil"
)

// clockSkew is subtracted from NotBefore so that peers whose clocks run
// slightly behind ours accept a certificate right after it was issued.
const clockSkew = time.Minute

// KeyPair is a certificate with its private key, parsed and PEM-encoded.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     crypto.Signer
	CertPEM []byte // exactly one CERTIFICATE block
	KeyPEM  []byte // PKCS#8 or EC private key PEM, via keyutil.MarshalPrivateKeyToPEM
}

// newKey returns a fresh ECDSA P-256 key: small, fast, and accepted by every
// TLS stack we care about.
func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ECDSA P-256 key: %w", err)
	}
	return key, nil
}

// serialLimit is 2^128: serials are random 128-bit numbers, well within the
// 20-octet limit of RFC 5280 and unpredictable enough to be unique.
var serialLimit = new(big.Int).Lsh(big.NewInt(1), 128)

// randomSerial returns a random, strictly positive 128-bit serial number.
func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, serialLimit)
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	// RFC 5280 requires a positive serial; zero is astronomically unlikely
	// but cheap to rule out.
	if serial.Sign() == 0 {
		serial.SetInt64(1)
	}
	return serial, nil
}

// subjectKeyID derives a key identifier from the public key as in RFC 7093
// method 1 (leftmost 160 bits of SHA-256 over the subjectPublicKey bits).
// We set it explicitly rather than relying on crypto/x509 defaults so that
// the value is stable and can be copied verbatim into a cross-signed
// certificate of the same key.
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("marshal public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("decode public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}

// newKeyPair signs template with signerKey under parent and returns the
// result as a KeyPair holding key. Cert is re-parsed from the DER so that it
// reflects exactly what peers will see (for instance times truncated to
// seconds).
func newKeyPair(template, parent *x509.Certificate, key crypto.Signer, signerKey crypto.Signer) (*KeyPair, error) {
	der, err := x509.CreateCertificate(rand.Reader, template, parent, key.Public(), signerKey)
	if err != nil {
		return nil, fmt.Errorf("create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse created certificate: %w", err)
	}
	keyPEM, err := encodeKeyPEM(key)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: encodeCertPEM(cert), KeyPEM: keyPEM}, nil
}

// encodeKeyPEM uses keyutil for the key types it knows (EC and RSA, the
// formats Kubernetes tooling expects) and falls back to PKCS#8 for anything
// else a user may have supplied, such as Ed25519.
func encodeKeyPEM(key crypto.Signer) ([]byte, error) {
	switch key.(type) {
	case *ecdsa.PrivateKey, *rsa.PrivateKey:
		out, err := keyutil.MarshalPrivateKeyToPEM(key)
		if err != nil {
			return nil, fmt.Errorf("encode private key: %w", err)
		}
		return out, nil
	default:
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("encode private key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: keyutil.PrivateKeyBlockType, Bytes: der}), nil
	}
}

func encodeCertPEM(cert *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})
}

// parsePrivateKey decodes a PEM private key and makes sure it can sign.
func parsePrivateKey(keyPEM []byte) (crypto.Signer, error) {
	raw, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	signer, ok := raw.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("private key of type %T cannot sign", raw)
	}
	return signer, nil
}

// publicKeysEqual reports whether two public keys are the same key. All key
// types in the standard library implement Equal.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	eq, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b)
}

// errNotCA is returned when a certificate used as a CA cannot issue
// certificates.
var errNotCA = errors.New("certificate is not a CA")

// checkIsCA rejects certificates that verifiers would refuse as issuers:
// crypto/x509 requires basic constraints with cA=true and, when key usage is
// present, the certSign bit.
func checkIsCA(cert *x509.Certificate) error {
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return errNotCA
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return fmt.Errorf("%w: key usage lacks certificate signing", errNotCA)
	}
	return nil
}

// checkSigningCA validates a CA KeyPair before it is used to sign anything,
// so callers get a clear error instead of a cryptic one from CreateCertificate.
func checkSigningCA(ca *KeyPair) error {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return errors.New("CA certificate and key are required")
	}
	if err := checkIsCA(ca.Cert); err != nil {
		return err
	}
	if !publicKeysEqual(ca.Key.Public(), ca.Cert.PublicKey) {
		return errors.New("CA key does not match CA certificate")
	}
	return nil
}

// minTime returns the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
