package localsystem

import (
	"context"
	"crypto/x509/pkix"
	"os"
	"strings"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/certtest"
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
	request, err := certtest.RequestPEM(pkix.Name{CommonName: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "addon-cluster1-cluster-proxy-x7k2p"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    request,
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
