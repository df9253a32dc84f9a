package certs

import (
	"bytes"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

const day = 24 * time.Hour

// t0 is the fixed "now" of most tests; the package never reads the clock.
var t0 = time.Date(2030, time.January, 1, 0, 0, 0, 0, time.UTC)

func mustCA(t *testing.T, cn string, validity time.Duration, now time.Time) *KeyPair {
	t.Helper()
	ca, err := NewCA(cn, validity, now)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return ca
}

func mustLeaf(t *testing.T, ca *KeyPair, spec LeafSpec, now time.Time) *KeyPair {
	t.Helper()
	leaf, err := IssueLeaf(ca, spec, now)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return leaf
}

func concat(parts ...[]byte) []byte {
	return bytes.Join(parts, nil)
}
