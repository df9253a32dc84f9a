package proxyenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// selfSigned returns a fresh self-signed CA certificate as PEM and its DER.
func selfSigned(t *testing.T, cn string) (pemBytes, der []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), der
}

// privateKeyPEM returns a fresh EC private key as PEM.
func privateKeyPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// expectFieldError asserts err is a *FieldError with the given field and reason and returns it.
func expectFieldError(g Gomega, err error, field, reason string) *FieldError {
	var fe *FieldError
	g.Expect(errors.As(err, &fe)).To(BeTrue(), "error %v is not a *FieldError", err)
	g.Expect(fe.Field).To(Equal(field))
	g.Expect(fe.Reason).To(Equal(reason))
	g.Expect(fe.Error()).To(Equal(field + ": " + fe.Message))
	return fe
}

// certDERs returns the DER of every CERTIFICATE block of data, in order, and fails on other blocks
// or trailing data.
func certDERs(g Gomega, data []byte) [][]byte {
	var out [][]byte
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		g.Expect(block.Type).To(Equal("CERTIFICATE"))
		out = append(out, block.Bytes)
	}
	g.Expect(rest).To(BeEmpty())
	return out
}
