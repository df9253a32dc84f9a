package kubeclient

import (
	"bytes"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

func TestWriteKubeconfigCarriesTheProxyURL(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "bootstrap.kubeconfig")
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{
		CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key")}}
	g.Expect(WriteKubeconfig(path, "hub", cfg, "http://127.0.0.1:8888", nil)).To(Succeed())

	info, err := os.Stat(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	kc, err := clientcmd.LoadFromFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kc.CurrentContext).To(Equal("hub"))
	g.Expect(kc.Clusters["hub"].ProxyURL).To(Equal("http://127.0.0.1:8888"))
	g.Expect(kc.Clusters["hub"].Server).To(Equal("https://127.0.0.1:6443"))
	g.Expect(kc.Clusters["hub"].CertificateAuthorityData).To(Equal([]byte("ca")), "a plain-HTTP proxy adds no CA")
	restCfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restCfg.Proxy).NotTo(BeNil(), "client-go honours proxy-url")
}

func TestWriteKubeconfigAppendsTheHTTPSProxysCAToTheHubs(t *testing.T) {
	g := NewWithT(t)
	hubCA, err := certs.NewCA("hub-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	proxyCA, err := certs.NewCA("proxy-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "bootstrap.kubeconfig")
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{
		// Without its final line break, which appending must not glue the next BEGIN line to.
		CAData: bytes.TrimRight(hubCA.CertPEM, "\n"), CertData: []byte("cert"), KeyData: []byte("key")}}
	g.Expect(WriteKubeconfig(path, "hub", cfg, "https://127.0.0.1:3129", proxyCA.CertPEM)).To(Succeed())

	kc, err := clientcmd.LoadFromFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kc.Clusters["hub"].ProxyURL).To(Equal("https://127.0.0.1:3129"))
	caData := kc.Clusters["hub"].CertificateAuthorityData
	g.Expect(string(caData)).To(Equal(string(hubCA.CertPEM)+string(proxyCA.CertPEM)), "the hub's CA PEM, then the proxy's")
	parsed, err := certs.ParseCertificates(caData)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed).To(HaveLen(2))
	g.Expect(parsed[0].Equal(hubCA.Cert)).To(BeTrue(), "the hub's CA first")
	g.Expect(parsed[1].Equal(proxyCA.Cert)).To(BeTrue(), "the proxy's CA second")
	g.Expect(cfg.CAData).To(Equal(bytes.TrimRight(hubCA.CertPEM, "\n")), "the caller's config is left alone")

	restCfg, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(restCfg.CAData).To(Equal(caData), "client-go trusts both, for the proxy and for the hub")
	proxyURL, err := restCfg.Proxy(&http.Request{URL: &url.URL{Scheme: "https", Host: "127.0.0.1:6443"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(proxyURL.String()).To(Equal("https://127.0.0.1:3129"))
}
