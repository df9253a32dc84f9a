package launcher_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/csrreview"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/launcher"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
)

const (
	// clusterName starts with a digit, as one of the local environment's clusters does.
	clusterName = "1st-cluster"
	entryHost   = "proxy-entrypoint.open-cluster-management-addon.svc"
	serverPod   = "cluster-proxy-0"
	agentPod    = render.AgentDeploymentName + "-0"
)

var _ = Describe("Launcher", Ordered, func() {
	var (
		ctx              = context.Background()
		hub, managed     client.Client
		mpc              *proxyv1alpha1.ManagedProxyConfiguration
		ca               *certs.KeyPair
		ports            struct{ frontend, agent, health, admin, connect, user int }
		proxyClient      tls.Certificate
		l                *launcher.Launcher
		heldHealthPort   net.Listener
		renderedAgentArg []string
	)

	BeforeAll(func() {
		var err error
		hub, err = client.New(hubConfig, client.Options{})
		Expect(err).NotTo(HaveOccurred())
		managed, err = client.New(managedConfig, client.Options{})
		Expect(err).NotTo(HaveOccurred())
		ports.frontend, ports.agent, ports.health, ports.admin, ports.connect, ports.user = freePort(), freePort(), freePort(), freePort(), freePort(), freePort()
		mpc = configuration(ports.frontend, ports.agent, ports.health, ports.admin, ports.connect, ports.user)
		ca, err = certs.NewCA("launcher-test-ca", 24*time.Hour, time.Now())
		Expect(err).NotTo(HaveOccurred())

		By("applying on the hub what the operator renders for the proxy-server, with certificates it would issue")
		ns := render.ServerNamespace(mpc)
		mustCreate(hub, ns)
		mustCreate(hub, render.CABundleSecret(mpc, ca.CertPEM))
		for _, hc := range render.HubCertificates(mpc, entryHost) {
			secret, kp := issueHubSecret(ca, hc.Certificate)
			mustCreate(hub, secret)
			if hc.Certificate.Spec.SecretName == render.SecretNamesOf(mpc).ProxyClient {
				proxyClient, err = tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
				Expect(err).NotTo(HaveOccurred())
			}
		}
		mustCreate(hub, render.ServerDeployment(mpc))

		By("applying on the managed cluster the agent's ManifestWork manifests, its CSR-signed certificate and hub kubeconfig")
		for _, u := range agentManifests(mpc, ca) {
			mustCreate(managed, u)
			if u.GetKind() == "Deployment" {
				containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				for _, a := range containers[0].(map[string]any)["args"].([]any) {
					renderedAgentArg = append(renderedAgentArg, a.(string))
				}
			}
		}
		Expect(renderedAgentArg).NotTo(BeEmpty())
		mustCreate(managed, agentCertificateSecret(ca))
		mustCreate(managed, hubKubeconfigSecret())

		// The rendered agent health port is taken (as by another cluster's agent), so the launcher must move it.
		if heldHealthPort, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(render.AgentHealthPort))); err != nil {
			GinkgoWriter.Printf("port %d is already taken by something else: %v\n", render.AgentHealthPort, err)
		}

		l, err = launcher.Start(ctx, launcher.Options{
			Hub:       launcher.Target{Name: "hub", Config: hubConfig},
			Clusters:  []launcher.Target{{Name: clusterName, Config: managedConfig}},
			Binaries:  binaries,
			WorkDir:   filepath.Join(workDir, "pods"),
			Log:       GinkgoWriter,
			Addresses: map[string]string{net.JoinHostPort(entryHost, strconv.Itoa(ports.agent)): net.JoinHostPort("127.0.0.1", strconv.Itoa(ports.agent))},
		})
		Expect(err).NotTo(HaveOccurred())
	})

	AfterAll(func() {
		if l != nil {
			Expect(l.Stop()).To(Succeed())
		}
		if heldHealthPort != nil {
			heldHealthPort.Close()
		}
	})

	pod := func(cluster string) launcher.PodStatus {
		for _, p := range l.Pods() {
			if p.Cluster == cluster {
				return p
			}
		}
		return launcher.PodStatus{}
	}
	running := func(cluster string) func(Gomega) launcher.PodStatus {
		return func(g Gomega) launcher.PodStatus {
			p := pod(cluster)
			g.Expect(p.Running).To(BeTrue(), "pod of %s: %+v\n%s", cluster, p, tail(p.Log))
			return p
		}
	}
	connectURL := func() string { return fmt.Sprintf("https://127.0.0.1:%d", ports.connect) }
	agentConnected := func(g Gomega) {
		view, _, err := connectedAgents(connectURL(), proxyClient, ca)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(view).To(HaveKeyWithValue(clusterName, []string{agentPod}))
	}
	podDir := func(cluster, namespace, name string) string {
		return filepath.Join(workDir, "pods", cluster+"_"+namespace+"_"+name)
	}

	It("runs the proxy-server and the proxy-agent from their Deployments, and the agent connects", func() {
		Eventually(running("hub")).Should(HaveField("Name", serverPod))
		Eventually(running(clusterName)).Should(HaveField("Name", agentPod))
		Eventually(agentConnected).Should(Succeed())
		server, a := pod("hub"), pod(clusterName)

		By("running the rendered proxy-server command line with the Secrets' files and loopback, nothing else")
		serverDir := podDir("hub", render.Namespace(mpc), serverPod)
		var want []string
		for _, a := range render.ServerArgs(mpc) {
			want = append(want, strings.Replace(a, "=/etc/", "="+serverDir+"/etc/", 1))
		}
		want = append(want, "--bind-address=127.0.0.1", "--server-id="+serverPod)
		Expect(cmdline(server.PID)).To(Equal(append([]string{binaries.ProxyServer}, want...)))
		Expect(os.ReadFile(filepath.Join(serverDir, "etc/server-pki/tls.crt"))).NotTo(BeEmpty())

		By("running the rendered proxy-agent command line with what a pod gets: id, loopback health, in-cluster config, Service addresses")
		healthPort := a.Ports[render.AgentHealthPort]
		Expect(healthPort).NotTo(BeZero(), "the rendered health port %d is taken, so it is moved", render.AgentHealthPort)
		agentDir := podDir(clusterName, render.DefaultAgentNamespace, agentPod)
		want = nil
		for _, arg := range renderedAgentArg {
			arg = strings.Replace(arg, "=/etc/", "="+agentDir+"/etc/", 1)
			if arg == fmt.Sprintf("--health-server-port=%d", render.AgentHealthPort) {
				arg = fmt.Sprintf("--health-server-port=%d", healthPort)
			}
			want = append(want, arg)
		}
		want = append(want,
			"--health-bind-address=127.0.0.1",
			"--agent-id="+agentPod,
			"--kubeconfig="+filepath.Join(agentDir, "in-cluster.kubeconfig"),
			fmt.Sprintf("--resolve=%s:%d=127.0.0.1:%d", entryHost, ports.agent, ports.agent),
		)
		Expect(cmdline(a.PID)).To(Equal(append([]string{binaries.ProxyAgent}, want...)))
		apiserver, err := url.Parse(managedConfig.Host)
		Expect(err).NotTo(HaveOccurred())
		host, port := apiserver.Hostname(), apiserver.Port()
		Expect(environ(a.PID)).To(ConsistOf("KUBERNETES_SERVICE_HOST="+host, "KUBERNETES_SERVICE_PORT="+port, "HOSTNAME="+agentPod),
			"the agent renders no env without a forward proxy; the process gets only what a pod gets")
		Eventually(func() (int, error) { return httpStatus(fmt.Sprintf("http://127.0.0.1:%d/healthz", healthPort)) }).Should(Equal(http.StatusOK))

		By("the agent reaching its kube-apiserver as its ServiceAccount (TokenRequest token): it renews the add-on Lease")
		Eventually(func(g Gomega) {
			lease := &coordinationv1.Lease{}
			g.Expect(managed.Get(ctx, types.NamespacedName{Namespace: render.DefaultAgentNamespace, Name: proxyv1alpha1.AddonName}, lease)).To(Succeed())
			g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Equal(agentPod)))
		}).Should(Succeed())
	})

	It("gives the proxy-server a renewed certificate Secret by rewriting its files, without a restart", func() {
		before := pod("hub")
		_, oldSerial, err := connectedAgents(connectURL(), proxyClient, ca)
		Expect(err).NotTo(HaveOccurred())

		secret := &corev1.Secret{}
		Expect(hub.Get(ctx, types.NamespacedName{Namespace: render.Namespace(mpc), Name: render.SecretNamesOf(mpc).ProxyServer}, secret)).To(Succeed())
		var certificate *proxyv1alpha1.ProxyCertificate
		for _, hc := range render.HubCertificates(mpc, entryHost) {
			if hc.Certificate.Spec.SecretName == secret.Name {
				certificate = hc.Certificate
			}
		}
		renewed, kp := issueHubSecret(ca, certificate)
		secret.Data = renewed.Data
		Expect(hub.Update(ctx, secret)).To(Succeed())

		Eventually(func() (string, error) {
			_, serial, err := connectedAgents(connectURL(), proxyClient, ca)
			return serial, err
		}).Should(Equal(kp.Cert.SerialNumber.Text(16)), "was %s", oldSerial)
		after := pod("hub")
		Expect(after.PID).To(Equal(before.PID))
		Expect(after.Restarts).To(BeZero())
		link, err := os.Readlink(filepath.Join(podDir("hub", render.Namespace(mpc), serverPod), "etc/server-pki/tls.crt"))
		Expect(err).NotTo(HaveOccurred())
		Expect(link).To(Equal("..data/tls.crt"), "written like the kubelet's atomic writer")
	})

	It("restarts the proxy-server when its Deployment's args change, as a rollout would", func() {
		before := pod("hub")
		d := &appsv1.Deployment{}
		Expect(hub.Get(ctx, types.NamespacedName{Namespace: render.Namespace(mpc), Name: mpc.Name}, d)).To(Succeed())
		d.Spec.Template.Spec.Containers[0].Args = append(d.Spec.Template.Spec.Containers[0].Args, "--keepalive-time=45s")
		Expect(hub.Update(ctx, d)).To(Succeed())

		Eventually(func(g Gomega) {
			p := running("hub")(g)
			g.Expect(p.PID).NotTo(Equal(before.PID))
			g.Expect(p.TemplateHash).NotTo(Equal(before.TemplateHash))
			g.Expect(cmdline(p.PID)).To(ContainElement("--keepalive-time=45s"))
			g.Expect(p.Restarts).To(BeZero(), "a rollout is not a crash")
		}).Should(Succeed())
		Expect(processAlive(before.PID)).To(BeFalse())
		Eventually(agentConnected).Should(Succeed(), "the agent reconnects to the new proxy-server")
	})

	It("restarts a killed proxy-agent with back-off and counts the exit", func() {
		before := pod(clusterName)
		Expect(syscall.Kill(before.PID, syscall.SIGKILL)).To(Succeed())

		Eventually(func(g Gomega) {
			p := running(clusterName)(g)
			g.Expect(p.PID).NotTo(Equal(before.PID))
			g.Expect(p.Restarts).To(Equal(before.Restarts + 1))
			g.Expect(p.LastExit).To(Equal("signal: killed"))
			g.Expect(p.StartedAt.Sub(p.LastExitAt)).To(BeNumerically(">=", launcher.InitialBackoff), "restarted only after the back-off")
		}).Should(Succeed())
		Eventually(agentConnected).Should(Succeed())
	})

	It("stops the agent when its Deployment is scaled to zero, and starts it again at one once its Secrets exist", func() {
		before := pod(clusterName)
		scale := func(n int32) {
			d := &appsv1.Deployment{}
			Expect(managed.Get(ctx, types.NamespacedName{Namespace: render.DefaultAgentNamespace, Name: render.AgentDeploymentName}, d)).To(Succeed())
			d.Spec.Replicas = ptr.To(n)
			Expect(managed.Update(ctx, d)).To(Succeed())
		}
		scale(0)
		Eventually(func() launcher.PodStatus { return pod(clusterName) }).Should(BeZero())
		Eventually(func() bool { return processAlive(before.PID) }).Should(BeFalse())
		Eventually(func() string { return podDir(clusterName, render.DefaultAgentNamespace, agentPod) }).
			ShouldNot(BeADirectory(), "the pod's files go with it, right after its process")

		By("waiting, as the kubelet does, for a mounted Secret that does not exist")
		cert := &corev1.Secret{}
		Expect(managed.Get(ctx, types.NamespacedName{Namespace: render.DefaultAgentNamespace, Name: render.AgentCertSecretName}, cert)).To(Succeed())
		Expect(managed.Delete(ctx, cert)).To(Succeed())
		scale(1)
		Eventually(func() launcher.PodStatus { return pod(clusterName) }).Should(And(
			HaveField("Running", BeFalse()),
			HaveField("Waiting", ContainSubstring("secret "+render.DefaultAgentNamespace+"/"+render.AgentCertSecretName+" not found"))))
		Consistently(func() bool { return pod(clusterName).Running }, "1500ms").Should(BeFalse())
		mustCreate(managed, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: cert.Namespace, Name: cert.Name},
			Data:       cert.Data,
		})
		Eventually(running(clusterName)).Should(HaveField("PID", Not(Equal(before.PID))))
		Eventually(agentConnected).Should(Succeed())
	})

	serviceCAFile := func() string {
		return filepath.Join(podDir(clusterName, render.DefaultAgentNamespace, agentPod), render.ServiceCAMount, render.ServiceCAKey)
	}
	agentDeployment := func() *appsv1.Deployment {
		d := &appsv1.Deployment{}
		Expect(managed.Get(ctx, types.NamespacedName{Namespace: render.DefaultAgentNamespace, Name: render.AgentDeploymentName}, d)).To(Succeed())
		return d
	}

	It("starts an agent whose optional service-CA ConfigMap is missing, and writes the file once the ConfigMap exists and when it changes, without a restart", func() {
		before := pod(clusterName)
		withCA := mpc.DeepCopy()
		withCA.Spec.ProxyAgent.AdditionalServiceCAConfigMap = "service-ca-bundle"
		d := agentDeployment()
		d.Spec.Template = *renderedAgentTemplate(withCA, ca)
		Expect(d.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("ConfigMap", HaveField("Optional", HaveValue(BeTrue())))),
			"render mounts the ConfigMap as an optional volume")
		Expect(managed.Update(ctx, d)).To(Succeed())

		By("rolling the agent out with the ConfigMap volume although the ConfigMap does not exist: an empty folder")
		var started launcher.PodStatus
		Eventually(func(g Gomega) {
			started = running(clusterName)(g)
			g.Expect(started.TemplateHash).NotTo(Equal(before.TemplateHash))
		}).Should(Succeed())
		Expect(cmdline(started.PID)).To(ContainElement("--service-ca-file=" + serviceCAFile()))
		Expect(filepath.Dir(serviceCAFile())).To(BeADirectory())
		_, err := os.Lstat(serviceCAFile())
		Expect(err).To(MatchError(os.ErrNotExist), "no ConfigMap, no file")
		Eventually(agentConnected).Should(Succeed())

		By("writing the file when the ConfigMap is created")
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: render.DefaultAgentNamespace, Name: "service-ca-bundle"},
			Data:       map[string]string{render.ServiceCAKey: string(ca.CertPEM), "unlisted": "not an item"},
		}
		mustCreate(managed, cm)
		Eventually(func() (string, error) {
			raw, err := os.ReadFile(serviceCAFile())
			return string(raw), err
		}).Should(Equal(string(ca.CertPEM)))
		Expect(filepath.Join(filepath.Dir(serviceCAFile()), "unlisted")).NotTo(BeAnExistingFile(), "only the rendered item is a file")

		By("rewriting it in place when the ConfigMap changes")
		other, err := certs.NewCA("launcher-test-service-ca", time.Hour, time.Now())
		Expect(err).NotTo(HaveOccurred())
		cm.Data[render.ServiceCAKey] = string(ca.CertPEM) + string(other.CertPEM)
		Expect(managed.Update(ctx, cm)).To(Succeed())
		Eventually(func() (string, error) {
			raw, err := os.ReadFile(serviceCAFile())
			return string(raw), err
		}).Should(Equal(cm.Data[render.ServiceCAKey]))
		link, err := os.Readlink(serviceCAFile())
		Expect(err).NotTo(HaveOccurred())
		Expect(link).To(Equal("..data/"+render.ServiceCAKey), "written like the kubelet's atomic writer")
		after := pod(clusterName)
		Expect(after.PID).To(Equal(started.PID), "the service-proxy re-reads the file; the agent is not restarted")
		Expect(after.Restarts).To(Equal(before.Restarts))
	})

	It("keeps an agent whose non-optional ConfigMap is missing from starting and says why, and starts it once the ConfigMap exists", func() {
		before := pod(clusterName)
		d := agentDeployment()
		for i := range d.Spec.Template.Spec.Volumes {
			if v := &d.Spec.Template.Spec.Volumes[i]; v.ConfigMap != nil {
				v.ConfigMap.Name, v.ConfigMap.Optional = "required-ca", nil
			}
		}
		Expect(managed.Update(ctx, d)).To(Succeed())

		Eventually(func() launcher.PodStatus { return pod(clusterName) }).Should(And(
			HaveField("Running", BeFalse()),
			HaveField("Waiting", ContainSubstring("configmap "+render.DefaultAgentNamespace+"/required-ca not found"))))
		Expect(processAlive(before.PID)).To(BeFalse(), "the rollout stopped the old process")
		Consistently(func() bool { return pod(clusterName).Running }, "1500ms").Should(BeFalse())

		mustCreate(managed, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: render.DefaultAgentNamespace, Name: "required-ca"},
			Data:       map[string]string{render.ServiceCAKey: string(ca.CertPEM)},
		})
		Eventually(running(clusterName)).Should(HaveField("TemplateHash", Not(Equal(before.TemplateHash))))
		Expect(os.ReadFile(serviceCAFile())).To(Equal(ca.CertPEM))
		Eventually(agentConnected).Should(Succeed())
	})

	It("leaves no process behind on Stop", func() {
		Expect(children()).NotTo(BeEmpty())
		Expect(l.Stop()).To(Succeed())
		Expect(children()).To(BeEmpty())
		for _, p := range l.Pods() {
			Expect(p.Running).To(BeFalse())
		}
		Expect(filepath.Join(workDir, "pods", "hub_"+render.Namespace(mpc)+"_"+serverPod+".log")).To(BeAnExistingFile(), "logs stay")
		Expect(l.Stop()).To(Succeed(), "Stop twice is fine")
	})
})

// configuration is the ManagedProxyConfiguration whose rendered objects the launcher runs: this run's free ports, and
// an in-cluster host name as the entrypoint, which the launcher maps to loopback.
func configuration(frontend, agent, health, admin, connect, user int) *proxyv1alpha1.ManagedProxyConfiguration {
	return &proxyv1alpha1.ManagedProxyConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName, UID: "2a5d2c4e-8c1e-4f7e-9b43-3c8f0e6f1a11"},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{
				Image: "proxy:test", Replicas: 1, Namespace: "open-cluster-management-addon",
				Entrypoint: &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
					Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: entryHost},
					Port: int32(agent),
				},
				// The user-server port is fixed at 9092 in render; this machine's free one is passed as a user would.
				AdditionalArgs: []string{fmt.Sprintf("--user-server-port=%d", user)},
			},
			ProxyAgent: proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: "proxy:test", Replicas: 1},
			Deploy: &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{
				ProxyServer: int32(frontend), AgentServer: int32(agent), HealthServer: int32(health),
				AdminServer: int32(admin), HTTPConnectServer: int32(connect),
			}},
			UserServer: &proxyv1alpha1.ManagedProxyConfigurationUserServer{},
		},
	}
}

// issueHubSecret issues the certificate a ProxyCertificate describes into its Secret, as the operator does.
func issueHubSecret(ca *certs.KeyPair, pc *proxyv1alpha1.ProxyCertificate) (*corev1.Secret, *certs.KeyPair) {
	spec := certs.LeafSpec{CommonName: pc.Spec.CommonName, DNSNames: pc.Spec.DNSNames, Duration: pc.Spec.Duration.Duration}
	for _, ip := range pc.Spec.IPAddresses {
		spec.IPAddresses = append(spec.IPAddresses, net.ParseIP(ip))
	}
	for _, u := range pc.Spec.Usages {
		spec.Usages = append(spec.Usages, certs.Usage(u))
	}
	kp, err := certs.IssueLeaf(ca, spec, time.Now())
	Expect(err).NotTo(HaveOccurred())
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: pc.Namespace, Name: pc.Spec.SecretName},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": kp.CertPEM, "tls.key": kp.KeyPEM, "ca.crt": ca.CertPEM},
	}, kp
}

// agentManifests are the objects of the agent's ManifestWork, as OCM's work agent applies them.
func agentManifests(mpc *proxyv1alpha1.ManagedProxyConfiguration, ca *certs.KeyPair) []*unstructured.Unstructured {
	withStatus := mpc.DeepCopy()
	withStatus.Status.Entrypoint = net.JoinHostPort(entryHost, strconv.Itoa(int(mpc.Spec.ProxyServer.Entrypoint.Port)))
	work, _, err := render.AgentWork(render.AgentInput{Cluster: clusterName, MPC: withStatus, CABundle: ca.CertPEM, EntrypointHost: entryHost})
	Expect(err).NotTo(HaveOccurred())
	var out []*unstructured.Unstructured
	for _, m := range work.Spec.Workload.Manifests {
		u := &unstructured.Unstructured{}
		Expect(json.Unmarshal(m.Raw, &u.Object)).To(Succeed())
		out = append(out, u)
	}
	return out
}

// renderedAgentTemplate is the pod template of the agent Deployment among mpc's ManifestWork manifests.
func renderedAgentTemplate(mpc *proxyv1alpha1.ManagedProxyConfiguration, ca *certs.KeyPair) *corev1.PodTemplateSpec {
	for _, u := range agentManifests(mpc, ca) {
		if u.GetKind() != "Deployment" {
			continue
		}
		raw, err := json.Marshal(u.Object)
		Expect(err).NotTo(HaveOccurred())
		d := &appsv1.Deployment{}
		Expect(json.Unmarshal(raw, d)).To(Succeed())
		return &d.Spec.Template
	}
	Fail("no Deployment in the agent manifests")
	return nil
}

// agentCertificateSecret is the agent's client certificate as the klusterlet writes it: a CSR with the subject the
// operator advertises, signed by the operator's CA.
func agentCertificateSecret(ca *certs.KeyPair) *corev1.Secret {
	subject := render.AgentCertificateSubject(clusterName, render.DefaultAgentNamespace, certs.Fingerprint(ca.Cert))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{
		CommonName: subject.CommonName, Organization: subject.Organizations, OrganizationalUnit: subject.OrganizationalUnits,
	}}, key)
	Expect(err).NotTo(HaveOccurred())
	signed, err := certs.SignCSR(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}), 12*time.Hour, nil, time.Now())
	Expect(err).NotTo(HaveOccurred())
	keyDER, err := x509.MarshalECPrivateKey(key)
	Expect(err).NotTo(HaveOccurred())
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: render.DefaultAgentNamespace, Name: render.AgentCertSecretName},
		Data:       map[string][]byte{"tls.crt": signed, "tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})},
	}
}

// hubKubeconfigSecret is the add-on's hub identity as the klusterlet writes it.
func hubKubeconfigSecret() *corev1.Secret {
	user, err := hubEnv.AddUser(envtest.User{
		Name:   "system:open-cluster-management:cluster:" + clusterName + ":addon:cluster-proxy:agent:proxy-agent",
		Groups: []string{csrreview.AllAgentsGroup},
	}, rest.CopyConfig(hubConfig))
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: render.DefaultAgentNamespace, Name: render.AgentHubKubeconfigSecretName},
		Data:       map[string][]byte{"kubeconfig": kubeconfig},
	}
}

func mustCreate(c client.Client, o client.Object) {
	ExpectWithOffset(1, c.Create(context.Background(), o)).To(Succeed(), "%T %s", o, o.GetName())
}

// connectedAgents reads GET /agents on the proxy-server's HTTP-CONNECT listener with the proxy-client certificate,
// and returns the serial of the serving certificate it presented.
func connectedAgents(baseURL string, cert tls.Certificate, ca *certs.KeyPair) (map[string][]string, string, error) {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
	}}
	resp, err := c.Get(baseURL + "/agents")
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, "", fmt.Errorf("GET /agents: %s", resp.Status)
	}
	var view struct {
		Clusters map[string]struct{ Agents []string } `json:"clusters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&view); err != nil {
		return nil, "", err
	}
	out := map[string][]string{}
	for cluster, a := range view.Clusters {
		out[cluster] = a.Agents
	}
	return out, resp.TLS.PeerCertificates[0].SerialNumber.Text(16), nil
}

func httpStatus(url string) (int, error) {
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// cmdline is a running process's argv.
func cmdline(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

func environ(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
}

func processAlive(pid int) bool {
	return pid > 0 && syscall.Kill(pid, 0) == nil
}

// children are the processes of this test (running or not yet reaped) that run the proxy binaries.
func children() []string {
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		// stat: pid (comm) state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		ours := len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) &&
			(strings.Contains(string(stat), "(proxy-server)") || strings.Contains(string(stat), "(proxy-agent)"))
		if ours || strings.HasPrefix(exe, binaries.ProxyServer) || strings.HasPrefix(exe, binaries.ProxyAgent) {
			out = append(out, fmt.Sprintf("%d %s", pid, exe))
		}
	}
	return out
}

func tail(path string) string {
	raw, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}
