package main

import (
	"crypto/x509/pkix"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/resolve"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
)

func writeHubKubeconfig(t *testing.T, server, proxyURL string) string {
	t.Helper()
	proxyLine := ""
	if proxyURL != "" {
		proxyLine = "\n    proxy-url: " + proxyURL
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters:
- name: hub
  cluster:
    server: ` + server + proxyLine + `
contexts:
- name: hub
  context: {cluster: hub, user: agent}
current-context: hub
users:
- name: agent
  user: {token: x}
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestHubTokenReviewsUseTheTunnelsForwardProxy(t *testing.T) {
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "NO_PROXY", "no_proxy"} {
		t.Setenv(v, "")
	}
	t.Setenv("http_proxy", "http://squid.example:3128") // only an http proxy, which the tunnel also uses for https
	proxy, err := agent.ProxyFromEnvironment()
	if err != nil {
		t.Fatal(err)
	}
	for _, server := range []string{"https://hub.example:6443", "https://127.0.0.1:6443"} {
		g := NewWithT(t)
		cfg, err := hubConfig(writeHubKubeconfig(t, server, ""), resolve.Resolver(nil), proxy, logr.Discard())
		g.Expect(err).NotTo(HaveOccurred())
		req, _ := http.NewRequest(http.MethodPost, server+"/apis/authentication.k8s.io/v1/tokenreviews", nil)
		got, err := cfg.Proxy(req)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).NotTo(BeNil(), server)
		g.Expect(got.String()).To(Equal("http://squid.example:3128"), server)
	}

	g := NewWithT(t)
	cfg, err := hubConfig(writeHubKubeconfig(t, "https://hub.example:6443", "http://other.example:8080"), resolve.Resolver(nil), proxy, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	req, _ := http.NewRequest(http.MethodPost, "https://hub.example:6443/", nil)
	got, err := cfg.Proxy(req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.String()).To(Equal("http://other.example:8080"), "the kubeconfig's own proxy-url wins")

	cfg, err = hubConfig(writeHubKubeconfig(t, "https://hub.example:6443", ""), resolve.Resolver(nil), nil, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	got, err = cfg.Proxy(req)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeNil(), "without a forward proxy the hub is dialed directly, as the tunnel is")
}

func TestIdentityProblemsAreTheProxyServersRefusals(t *testing.T) {
	subject := func(cluster, namespace string) pkix.Name {
		s := contract.AgentCertificateSubject(cluster, namespace, "SHA256:00")
		return pkix.Name{CommonName: s.CommonName, Organization: s.Organizations, OrganizationalUnit: s.OrganizationalUnits}
	}
	for _, tt := range []struct {
		name        string
		subject     pkix.Name
		identifiers string
		problems    int
	}{
		{"the rendered identifiers", subject("c1", "ns"), contract.AgentIdentifiers("c1", "ns"), 0},
		{"the cluster alone", subject("c1", "ns"), "host=c1", 0},
		{"another namespace", subject("c1", "ns"), "host=c1&host=c1.other", 1},
		{"another cluster", subject("c1", "ns"), "host=c2", 1},
		{"another identifier type", subject("c1", "ns"), "host=c1&ipv4=10.0.0.1", 1},
		{"no identifiers", subject("c1", "ns"), "", 1},
		{"a certificate for another cluster", subject("c2", "ns"), "host=c1", 2},
		{"not an agent certificate", pkix.Name{CommonName: "someone"}, "host=c1", 1},
	} {
		got := identityProblems(tt.subject, "c1", tt.identifiers)
		NewWithT(t).Expect(got).To(HaveLen(tt.problems), tt.name)
	}
}

// proxyCA stands for a forward proxy's CA bundle; its content is not parsed by the command line.
var proxyCA = []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")

// withServiceProxy is a configuration whose agents run the service-proxy for one allow-listed service.
func withServiceProxy() *proxyv1alpha1.ManagedProxyConfiguration {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	mpc.Spec.ProxyAgent.Image = "img"
	mpc.Spec.UserServer = &proxyv1alpha1.ManagedProxyConfigurationUserServer{
		AllowedServices: []proxyv1alpha1.AllowedService{{Namespace: "team", Name: "web", Port: 8443}},
	}
	return mpc
}

// parseRendered parses, with the agent's own flags, the command line the operator renders for the agent of cluster
// c1 from mpc, with the service domain svc.corp.
func parseRendered(g Gomega, mpc *proxyv1alpha1.ManagedProxyConfiguration) config {
	var c config
	fs := flag.NewFlagSet("proxy-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bindFlags(fs, &c, "host")
	in := render.AgentInput{Cluster: "c1", MPC: mpc, EntrypointHost: "hub.example.com"}
	g.Expect(fs.Parse(render.AgentArgs(in, "ns", proxyenv.Settings{HTTPSProxy: "https://proxy.corp", CABundle: proxyCA}, proxyenv.AgentVariables{ServiceDomain: "svc.corp"}))).To(Succeed())
	g.Expect(fs.Args()).To(BeEmpty())
	return c
}

func TestTheRenderedCommandLineParsesWithTheServiceCAFile(t *testing.T) {
	mpc := withServiceProxy()
	g := NewWithT(t)
	c := parseRendered(g, mpc)
	g.Expect(c.serviceProxyPort).To(Equal(contract.ServiceProxyPort))
	g.Expect(c.allowedServices).To(Equal([]string{"team/web:8443"}))
	g.Expect(c.serviceDomain).To(Equal("svc.corp"))
	g.Expect(c.serviceCAFile).To(BeEmpty(), "no additionalServiceCAConfigMap: the system roots only")

	mpc.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"
	c = parseRendered(g, mpc)
	g.Expect(c.serviceCAFile).To(Equal("/etc/service-ca/service-ca.crt"))
}

func TestTheRenderedCommandLineKeepsTheProxyCAApartFromTheHubCA(t *testing.T) {
	g := NewWithT(t)
	c := parseRendered(g, withServiceProxy())
	g.Expect(c.caCert).To(Equal("/etc/ca/ca.crt"))
	g.Expect(c.proxyCACert).To(Equal("/etc/ca/proxy-ca.crt"))
}

func TestEveryAllowedServiceProxyArgParsesWithTheAgentsFlags(t *testing.T) {
	mpc := withServiceProxy()
	mpc.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"

	// One entry of each form the CRD accepts in spec.proxyAgent.additionalServiceProxyArgs.
	mpc.Spec.ProxyAgent.AdditionalServiceProxyArgs = []string{
		"--allowed-service=monitoring/prometheus:9090",
		"--allowed-service=team/api",
		"--service-domain=svc.cluster.local.",
		"--service-ca-file=/etc/other-ca/ca.crt",
		"-v=3",
	}
	g := NewWithT(t)
	c := parseRendered(g, mpc)
	g.Expect(c.allowedServices).To(Equal([]string{"team/web:8443", "monitoring/prometheus:9090", "team/api"}),
		"the configuration's allow-list first, then the extra services")
	_, err := allowlist.ParseAll(c.allowedServices)
	g.Expect(err).NotTo(HaveOccurred(), "the agent would start with this allow-list")
	g.Expect(c.serviceDomain).To(Equal("svc.cluster.local."), "the user's value comes after the customizedVariable's, so it wins")
	g.Expect(c.serviceCAFile).To(Equal("/etc/other-ca/ca.crt"), "the user's value comes after the rendered mount path, so it wins")
	g.Expect(c.verbosity).To(Equal(3))
	g.Expect(c.enableImpersonation).To(BeTrue())

	mpc.Spec.ProxyAgent.AdditionalServiceProxyArgs = []string{"--v=5"}
	g.Expect(parseRendered(g, mpc).verbosity).To(Equal(5))

	mpc.Spec.ProxyAgent.AdditionalArgs = []string{"--v=1"}
	g.Expect(parseRendered(g, mpc).verbosity).To(Equal(1), "additionalArgs come last and win")
}
