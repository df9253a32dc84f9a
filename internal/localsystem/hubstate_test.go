package localsystem

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// TestTheHubStateHoldsEveryKindAndNoSecret: what a failed start leaves for its reader lists every kind of hubKinds
// from an OCM v1.2 hub, the CSRs with their decisions among them, and no Secret.
func TestTheHubStateHoldsEveryKindAndNoSecret(t *testing.T) {
	dir := t.TempDir()
	hub, err := testenv.NewHubOf(testenv.OCM12, dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := hub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := hub.Stop(); err != nil {
			t.Error(err)
		}
	})
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "addon-cluster1-cluster-proxy-x7k2p"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    certificateRequest(t),
			SignerName: "open-cluster-management.io/proxy-agent-signer",
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
		},
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept-out"}, StringData: map[string]string{"key": "not-in-the-state"}}
	for _, obj := range []client.Object{csr, secret} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	s := &System{opts: Options{WorkDir: dir}, HubClient: c}
	path, err := s.SaveHubState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	state := string(raw)
	for _, k := range hubKinds {
		if !strings.Contains(state, "# "+k.gvk.Kind+"\n") {
			t.Errorf("no %s in the hub state", k.gvk.Kind)
		}
	}
	for _, want := range []string{csr.Name, csr.Spec.SignerName} {
		if !strings.Contains(state, want) {
			t.Errorf("the hub state lacks %q", want)
		}
	}
	if strings.Contains(state, "not-in-the-state") || strings.Contains(state, secret.Name) {
		t.Error("the hub state holds a Secret")
	}
}

// certificateRequest is a PEM certificate request of a fresh P-256 key.
func certificateRequest(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: "agent"}}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}
