package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tunnelclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/sessionrec"
)

func TestParsesTheCommandLineTheOperatorRenders(t *testing.T) {
	g := NewWithT(t)
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	mpc.Spec.ProxyServer.Replicas = 3
	mpc.Spec.ProxyServer.AdditionalArgs = []string{"--allowed-service=monitoring/prometheus:9090", "--allowed-service=default/web",
		"--per-cluster-metrics=false"}
	args := append(kubeletArgs(t, mpc), "--server-id=replica-0")

	c, err := parseFlags(args, io.Discard)
	g.Expect(err).NotTo(HaveOccurred(), "args %q", args)
	g.Expect(c.serverCount).To(Equal(3))
	g.Expect(c.serverID).To(Equal("replica-0"))
	g.Expect(c.allowed).To(Equal(allowlist.List{{Namespace: "monitoring", Name: "prometheus", Port: 9090}, {Namespace: "default", Name: "web"}}))
	g.Expect(c.perClusterMetrics).To(BeFalse(), "an additional argument")
	g.Expect(c.hubServiceAccountGroups).To(Equal("prefixed"), "hub ServiceAccount groups are prefixed unless asked")

	mpc.Spec.HubUsers = &proxyv1alpha1.HubUsers{ServiceAccountGroups: proxyv1alpha1.ServiceAccountGroupsUnprefixed}
	unprefixed, err := parseFlags(append(kubeletArgs(t, mpc), "--server-id=replica-0"), io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(unprefixed.hubServiceAccountGroups).To(Equal("unprefixed"), "the existing add-on's names, from the configuration")
	mpc.Spec.HubUsers = nil

	o := c.options()
	p := contract.PortsOf(mpc)
	g.Expect(o.FrontendAddr).To(Equal(":" + itoa(p.ProxyServer)))
	g.Expect(o.AgentAddr).To(Equal(":" + itoa(p.AgentServer)))
	g.Expect(o.AdminAddr).To(Equal("127.0.0.1:"+itoa(p.AdminServer)), "the admin port binds loopback only")
	g.Expect(o.HTTPConnectAddr).To(Equal(":" + itoa(p.HTTPConnectServer)))
	g.Expect(o.HealthAddr).To(Equal(podIP+":"+itoa(p.HealthServer)), "out of reach of port-forward, which connects to loopback")
	g.Expect(o.UserServerAddr).To(Equal(":9092"))
	g.Expect(o.ServerCACert).NotTo(BeEmpty())
	g.Expect(o.UserServerCert).NotTo(BeEmpty())
	g.Expect(c.peerAddress).To(Equal("proxy-entrypoint.open-cluster-management-cluster-proxy.svc:" + itoa(p.HTTPConnectServer)))
	g.Expect(c.peerCert).NotTo(BeEmpty())
	g.Expect(o.PeerWait).To(Equal(server.DefaultPeerWait))
}

func TestAcceptsTheANPFlagsExistingConfigurationsPass(t *testing.T) {
	g := NewWithT(t)
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	mpc.Spec.ProxyServer.Replicas = 1
	mpc.Spec.ProxyServer.AdditionalArgs = []string{"--keepalive-time=30s", "--frontend-keepalive-time=2m", "--v=4"}
	c, err := parseFlags(kubeletArgs(t, mpc), io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	o := c.options()
	g.Expect(o.AgentKeepaliveTime.String()).To(Equal("30s"))
	g.Expect(o.FrontendKeepaliveTime.String()).To(Equal("2m0s"))
	g.Expect(c.zap.Level).NotTo(BeNil(), "-v raises the log level")
}

func TestRejectsBadCommandLines(t *testing.T) {
	base := []string{
		"--server-ca-cert=ca", "--server-cert=c", "--server-key=k",
		"--cluster-ca-cert=ca", "--cluster-cert=c", "--cluster-key=k", "--user-server-port=0",
	}
	tests := map[string][]string{
		"an unknown flag":         {"--mode=http-connect"},
		"another proxy strategy":  {"--proxy-strategies=default"},
		"a bad allowed service":   {"--allowed-service=no-slash"},
		"a stray argument":        {"extra"},
		"no server certificate":   {"--server-cert="},
		"a user-server sans cert": {"--user-server-port=9092"},
		"a port out of range":     {"--agent-port=70000"},
		"a peer without a port":   {"--peer-address=proxy-entrypoint", "--peer-cert=c", "--peer-key=k"},
		"a peer without its cert": {"--peer-address=proxy-entrypoint:8094"},
		"a bad group naming":      {"--hub-service-account-groups=as-they-are"},
		"a queue under a packet":  {"--frontend-queue-bytes=1000"},
		"no stall timeout":        {"--frontend-stall-timeout=0s"},
		"no token reviews":        {"--token-review-concurrency=0"},
		"no streams per client":   {"--max-streams-per-client=0"},
		"no dials per agent":      {"--max-pending-dials-per-agent=-1"},
	}
	for name, extra := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(append(append([]string{}, base...), extra...), io.Discard)
			NewWithT(t).Expect(err).To(HaveOccurred())
		})
	}

	g := NewWithT(t)
	c, err := parseFlags(append(append([]string{}, base...), "--http-connect-port=0", "--bind-address=127.0.0.1"), io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.options().HTTPConnectAddr).To(BeEmpty(), "port 0 turns the HTTP-CONNECT frontend off")
	g.Expect(c.options().UserServerAddr).To(BeEmpty())
	g.Expect(c.options().FrontendAddr).To(Equal("127.0.0.1:8090"))
	g.Expect(c.serverID).NotTo(BeEmpty(), "the hostname by default")
}

// podIP is the pod's IP kubeletArgs gives the container.
const podIP = "10.244.0.7"

// kubeletArgs is the proxy-server's command line as the kubelet starts it from the rendered Deployment: each $(VAR)
// replaced by the container's variable of that name, the pod's IP for status.podIP. A reference to a variable the
// container does not define stays as it is, as the kubelet leaves it.
func kubeletArgs(t *testing.T, mpc *proxyv1alpha1.ManagedProxyConfiguration) []string {
	t.Helper()
	c := render.ServerDeployment(mpc).Spec.Template.Spec.Containers[0]
	var pairs []string
	for _, e := range c.Env {
		value := e.Value
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			value = podIP
		}
		pairs = append(pairs, "$("+e.Name+")", value)
	}
	expand := strings.NewReplacer(pairs...)
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = expand.Replace(a)
	}
	return args
}

func TestRefusesABindAddressThatIsNotAnIP(t *testing.T) {
	base := []string{"--server-ca-cert=ca", "--server-cert=c", "--server-key=k", "--cluster-ca-cert=ca", "--cluster-cert=c",
		"--cluster-key=k", "--user-server-port=0", "--server-id=r"}
	for _, bad := range []string{"--bind-address=localhost", "--health-bind-address=$(POD_IP)"} {
		_, err := parseFlags(append(append([]string{}, base...), bad), io.Discard)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring(strings.SplitN(bad, "=", 2)[0]+"=")), bad)
	}
	c, err := parseFlags(append(append([]string{}, base...), "--bind-address=::1"), io.Discard)
	g := NewWithT(t)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.options().FrontendAddr).To(Equal("[::1]:8090"))
	g.Expect(c.options().HealthAddr).To(Equal("[::1]:8092"), "the health port follows --bind-address unless told otherwise")
}

func itoa(p int32) string { return strconv.Itoa(int(p)) }

func TestTakesTheAdoptedProxyClientsByFingerprintAndRefusesAnythingElse(t *testing.T) {
	g := NewWithT(t)
	base := []string{"--server-ca-cert=ca", "--server-cert=c", "--server-key=k", "--cluster-ca-cert=ca", "--cluster-cert=c",
		"--cluster-key=k", "--user-server-port=0", "--server-id=r"}
	fp := sha256.Sum256([]byte("a certificate"))
	c, err := parseFlags(append(append([]string{}, base...), "--"+contract.AdoptedProxyClientFlag+"="+hex.EncodeToString(fp[:])), io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.options().AdoptedProxyClients).To(Equal([][sha256.Size]byte{fp}))
	for _, bad := range []string{"abc", hex.EncodeToString(fp[:31]), strings.Repeat("zz", 32)} {
		_, err := parseFlags(append(append([]string{}, base...), "--"+contract.AdoptedProxyClientFlag+"="+bad), io.Discard)
		g.Expect(err).To(MatchError(ContainSubstring(contract.AdoptedProxyClientFlag)), bad)
	}
}

func TestRecordSinksNameTheSinksAsTheManagerReadsThem(t *testing.T) {
	dir := t.TempDir()
	opts := audit.NewOptions()
	opts.LogPath = dir + "/audit.log"
	opts.WebhookKubeconfig = dir + "/webhook"
	if err := os.WriteFile(opts.WebhookKubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: r\n  cluster: {server: 'https://127.0.0.1:1'}\n"+
		"contexts:\n- name: r\n  context: {cluster: r}\ncurrent-context: r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	auditor, err := audit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer auditor.Shutdown()
	var names []string
	for _, s := range recordSinks(auditor, sessionrec.New(sessionrec.Options{Sink: sessionrec.DirSink{Dir: dir}})) {
		names = append(names, s.Sink)
	}
	want := []string{tunnelclient.RecordSinkAuditLog, tunnelclient.RecordSinkAuditWebhook, tunnelclient.RecordSinkSessionRecording}
	if !slices.Equal(names, want) {
		t.Fatalf("record sinks %v, want %v", names, want)
	}
}
