package realcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/keyutil"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
)

// certLifetime covers any run; the clusters are thrown away when it ends.
const certLifetime = 7 * 24 * time.Hour

// clientIdentity is a component's client certificate and the kubeconfig holding it.
type clientIdentity struct {
	file   string // config/<file>.kubeconfig
	user   string
	groups []string
	local  bool // the component runs on the node: it dials 127.0.0.1
}

// issueCertificates makes the cluster's CA, issues every certificate the cluster needs under <Dir>/pki and writes its
// kubeconfigs: admin.kubeconfig (cluster-admin, for https://NodeIP:6443) and one per node component. It returns the CA.
func (c *Cluster) issueCertificates() (*certs.KeyPair, error) {
	now := time.Now()
	dir := filepath.Join(c.opts.Dir, "pki")
	ca, err := certs.NewCA(c.opts.Name+"-ca", certLifetime, now)
	if err != nil {
		return nil, err
	}
	if err := writePair(dir, "ca", ca); err != nil {
		return nil, err
	}
	dnsNames := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	ips := []net.IP{c.NodeIP, net.IPv4(127, 0, 0, 1), net.IPv4(100, 65, 0, 1)}
	for _, san := range c.opts.APIServerSANs {
		if ip := net.ParseIP(san); ip != nil {
			ips = append(ips, ip)
		} else {
			dnsNames = append(dnsNames, san)
		}
	}
	servers := map[string]certs.LeafSpec{
		"apiserver": {CommonName: "kube-apiserver", DNSNames: dnsNames, IPAddresses: ips, Usages: []certs.Usage{certs.UsageServerAuth}},
		"kubelet":   {CommonName: c.opts.Name, DNSNames: []string{c.opts.Name}, IPAddresses: []net.IP{c.NodeIP}, Usages: []certs.Usage{certs.UsageServerAuth}},
		// The kube-apiserver's identity towards kubelets (logs, exec, port-forward).
		"apiserver-kubelet-client": {CommonName: "kube-apiserver-kubelet-client", Organizations: []string{"system:masters"}, Usages: []certs.Usage{certs.UsageClientAuth}},
	}
	for name, spec := range servers {
		spec.Duration = certLifetime
		kp, err := certs.IssueLeaf(ca, spec, now)
		if err != nil {
			return nil, err
		}
		if err := writePair(dir, name, kp); err != nil {
			return nil, err
		}
	}
	if err := writeServiceAccountKey(dir); err != nil {
		return nil, err
	}
	if err := writeFrontProxy(dir, now); err != nil {
		return nil, err
	}
	identities := []clientIdentity{
		{file: "admin", user: "kubernetes-admin", groups: []string{"system:masters"}},
		{file: "kubelet", user: "system:node:" + c.opts.Name, groups: []string{"system:nodes"}, local: true},
		{file: "kube-controller-manager", user: "system:kube-controller-manager", local: true},
		{file: "kube-scheduler", user: "system:kube-scheduler", local: true},
		{file: "kube-proxy", user: "system:kube-proxy", local: true},
	}
	for _, id := range identities {
		kp, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: id.user, Organizations: id.groups,
			Usages: []certs.Usage{certs.UsageClientAuth}, Duration: certLifetime}, now)
		if err != nil {
			return nil, err
		}
		server := c.APIServer()
		if id.local {
			server = fmt.Sprintf("https://127.0.0.1:%d", APIServerPort)
		}
		path := filepath.Join(c.opts.Dir, "config", id.file+".kubeconfig")
		cfg := &rest.Config{Host: server, TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: kp.CertPEM, KeyData: kp.KeyPEM}}
		if err := kubeclient.WriteKubeconfig(path, c.opts.Name, cfg, "", nil); err != nil {
			return nil, err
		}
	}
	c.Kubeconfig = filepath.Join(c.opts.Dir, "config", "admin.kubeconfig")
	return ca, nil
}

// writeFrontProxy writes the front proxy's CA and client pair (front-proxy-ca, front-proxy-client), as kubeadm makes
// them: the kube-apiserver proxies requests for aggregated APIs (such as OLM's packages.operators.coreos.com) to
// their servers with this client certificate and the user in request headers, and publishes the CA in the ConfigMap
// kube-system/extension-apiserver-authentication, from which those servers learn to trust it.
func writeFrontProxy(dir string, now time.Time) error {
	ca, err := certs.NewCA("front-proxy-ca", certLifetime, now)
	if err != nil {
		return err
	}
	client, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: FrontProxyClient, Usages: []certs.Usage{certs.UsageClientAuth},
		Duration: certLifetime}, now)
	if err != nil {
		return err
	}
	if err := writePair(dir, "front-proxy-ca", ca); err != nil {
		return err
	}
	return writePair(dir, "front-proxy-client", client)
}

// FrontProxyClient is the name of the kube-apiserver's front-proxy client certificate, the one name aggregated API
// servers accept request headers from.
const FrontProxyClient = "front-proxy-client"

// writePair writes <name>.crt and <name>.key.
func writePair(dir, name string, kp *certs.KeyPair) error {
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), kp.CertPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), kp.KeyPEM, 0o600)
}

// writeServiceAccountKey writes sa.key and sa.pub, the key that signs and verifies ServiceAccount tokens.
func writeServiceAccountKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// IssueClient issues a client certificate of the cluster's CA for user in groups: an identity its kube-apiserver
// authenticates (e.g. a bootstrap identity for another cluster's agent).
func (c *Cluster) IssueClient(user string, groups ...string) (*certs.KeyPair, error) {
	return certs.IssueLeaf(c.ca, certs.LeafSpec{CommonName: user, Organizations: groups,
		Usages: []certs.Usage{certs.UsageClientAuth}, Duration: certLifetime}, time.Now())
}
