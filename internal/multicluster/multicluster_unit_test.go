package multicluster

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ocmjoin"
)

func TestValidateClustersRejectsWhatCannotBecomeAManagedCluster(t *testing.T) {
	tests := []struct {
		name     string
		clusters []ClusterSpec
		wantErr  string
	}{
		{name: "digit-leading name and an http proxy", clusters: []ClusterSpec{{Name: "1st-cluster"}, {Name: "cluster1", Proxy: "http://127.0.0.1:3128"}}},
		{name: "no cluster", wantErr: "no managed cluster"},
		{name: "upper case", clusters: []ClusterSpec{{Name: "Cluster1"}}, wantErr: `cluster name "Cluster1"`},
		{name: "dot", clusters: []ClusterSpec{{Name: "a.b"}}, wantErr: `cluster name "a.b"`},
		{name: "twice", clusters: []ClusterSpec{{Name: "c"}, {Name: "c"}}, wantErr: "used twice"},
		{name: "proxy without scheme", clusters: []ClusterSpec{{Name: "c", Proxy: "127.0.0.1:3128"}}, wantErr: "proxy of cluster c"},
		{name: "socks proxy", clusters: []ClusterSpec{{Name: "c", Proxy: "socks5://127.0.0.1:1080"}}, wantErr: "proxy of cluster c"},
		// The AddOnDeploymentConfig's checker (proxyenv) judges the proxy, as it does when the same URL goes there.
		{name: "proxy with a path", clusters: []ClusterSpec{{Name: "c", Proxy: "https://127.0.0.1:3129/squid"}},
			wantErr: `proxy of cluster c: proxy URL "https://127.0.0.1:3129/squid" has a path`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := validateClusters(tt.clusters)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			}
		})
	}
}

func TestClientCAAuthnSignsUsersWithTheCAItWroteToDisk(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	a, err := newClientCAAuthn(dir)
	g.Expect(err).NotTo(HaveOccurred())

	args := envtest.EmptyArguments()
	g.Expect(a.Configure(t.TempDir(), args)).To(Succeed())
	g.Expect(args.Get("client-ca-file").Get(nil)).To(ConsistOf(filepath.Join(dir, "ca.crt")))
	keyInfo, err := os.Stat(filepath.Join(dir, "ca.key"))
	g.Expect(err).NotTo(HaveOccurred(), "kube-controller-manager signs with the key file")
	g.Expect(keyInfo.Mode().Perm()).To(Equal(os.FileMode(0o600)))

	cfg, err := a.AddUser(envtest.User{Name: "boot", Groups: []string{ocmjoin.BootstrapGroup}}, &rest.Config{Host: "https://127.0.0.1:6443"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://127.0.0.1:6443"))
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	g.Expect(err).NotTo(HaveOccurred())
	ca := parseCert(t, caPEM)
	g.Expect(ca.NotAfter.Sub(ca.NotBefore)).To(BeNumerically(">=", caValidity), "long-lived, since signed certs are capped at its expiry")
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	cert := parseCert(t, cfg.CertData)
	_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cert.Subject.CommonName).To(Equal("boot"))
	g.Expect(cert.Subject.Organization).To(ConsistOf(ocmjoin.BootstrapGroup))
}

func TestValidateClustersChecksTheProxyCA(t *testing.T) {
	ca, err := certs.NewCA("proxy-ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.NewCA("other-ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	broken := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
	const httpsProxy = "https://127.0.0.1:3129"
	tests := []struct {
		name    string
		spec    ClusterSpec
		wantErr string
	}{
		{name: "https proxy with its CA", spec: ClusterSpec{Name: "c", Proxy: httpsProxy, ProxyCA: ca.CertPEM}},
		{name: "https proxy with a bundle of two CAs", spec: ClusterSpec{Name: "c", Proxy: httpsProxy,
			ProxyCA: append(append([]byte(nil), ca.CertPEM...), other.CertPEM...)}},
		{name: "https proxy whose CA the system trusts already", spec: ClusterSpec{Name: "c", Proxy: httpsProxy}},
		{name: "CA for a plain-HTTP proxy", spec: ClusterSpec{Name: "c", Proxy: "http://127.0.0.1:3128", ProxyCA: ca.CertPEM},
			wantErr: `ProxyCA of cluster c: only an https:// Proxy has a CA to trust, the proxy is "http://127.0.0.1:3128"`},
		{name: "CA without a proxy", spec: ClusterSpec{Name: "c", ProxyCA: ca.CertPEM},
			wantErr: `ProxyCA of cluster c: only an https:// Proxy has a CA to trust, the proxy is ""`},
		{name: "not PEM", spec: ClusterSpec{Name: "c", Proxy: httpsProxy, ProxyCA: []byte("proxy-ca")},
			wantErr: "ProxyCA of cluster c: proxy CA bundle is not PEM"},
		{name: "a private key", spec: ClusterSpec{Name: "c", Proxy: httpsProxy, ProxyCA: append(append([]byte(nil), ca.CertPEM...), ca.KeyPEM...)},
			wantErr: "ProxyCA of cluster c: proxy CA bundle PEM block 2 is a private key (EC PRIVATE KEY)"},
		{name: "a certificate that does not parse", spec: ClusterSpec{Name: "c", Proxy: httpsProxy, ProxyCA: broken},
			wantErr: "ProxyCA of cluster c: proxy CA bundle PEM block 1 is a CERTIFICATE that does not parse (x509:"},
		{name: "text after the certificates", spec: ClusterSpec{Name: "c", Proxy: httpsProxy, ProxyCA: append(append([]byte(nil), ca.CertPEM...), "trailing"...)},
			wantErr: "ProxyCA of cluster c: text after the last PEM block is not PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := validateClusters([]ClusterSpec{{Name: "direct"}, tt.spec})
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			}
		})
	}
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestCleanWorkDirCleansOnlyAnEnvironmentsFolder(t *testing.T) {
	g := NewWithT(t)

	fresh := &Env{WorkDir: filepath.Join(t.TempDir(), "new")}
	g.Expect(fresh.cleanWorkDir()).To(Succeed())
	g.Expect(fresh.WorkDir).To(BeADirectory())

	foreign := &Env{WorkDir: t.TempDir()}
	g.Expect(os.WriteFile(filepath.Join(foreign.WorkDir, "notes.txt"), []byte("mine"), 0o644)).To(Succeed())
	g.Expect(foreign.cleanWorkDir()).To(MatchError(ContainSubstring("not made by an earlier environment")))
	g.Expect(filepath.Join(foreign.WorkDir, "notes.txt")).To(BeARegularFile())

	earlier := &Env{WorkDir: t.TempDir()}
	for _, f := range []string{workDirMarker, "hub/etcd/member", "clusters/c1/etcd/member", "other/keep"} {
		g.Expect(os.MkdirAll(filepath.Join(earlier.WorkDir, filepath.Dir(f)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(earlier.WorkDir, f), nil, 0o644)).To(Succeed())
	}
	g.Expect(earlier.cleanWorkDir()).To(Succeed())
	g.Expect(filepath.Join(earlier.WorkDir, "hub")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(earlier.WorkDir, "clusters")).NotTo(BeAnExistingFile())
	g.Expect(filepath.Join(earlier.WorkDir, "other", "keep")).To(BeARegularFile(), "only the environment's own files go")
}
