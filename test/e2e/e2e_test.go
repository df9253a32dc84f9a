//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	workv1 "open-cluster-management.io/api/work/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/squid"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/system"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

var _ = Describe("The local system", Ordered, func() {
	It("joins every cluster through OCM and brings every tunnel up with certificates from klusterlet CSRs", func() {
		states := must(sys.States(ctx()))
		Expect(states).To(HaveLen(2))
		for _, st := range states {
			Expect(st.Available).To(BeTrue(), "%s: %s", st.Name, st.Status)
			Expect(st.AddOnAvailable).To(Equal(metav1.ConditionTrue), st.Name)
		}
		csrs := &certificatesv1.CertificateSigningRequestList{}
		Expect(sys.HubClient.List(ctx(), csrs)).To(Succeed())
		for _, cluster := range clusterNames() {
			var signed *certificatesv1.CertificateSigningRequest
			for i := range csrs.Items {
				csr := &csrs.Items[i]
				if csr.Spec.SignerName == "open-cluster-management.io/proxy-agent-signer" &&
					csr.Labels["open-cluster-management.io/cluster-name"] == cluster && len(csr.Status.Certificate) > 0 {
					signed = csr
				}
			}
			Expect(signed).NotTo(BeNil(), "cluster %s has a signed agent CSR", cluster)
			Expect(signed.Spec.Username).To(HavePrefix("system:open-cluster-management:"+cluster+":"), "the klusterlet created it")
			chain := must(certs.ParseCertificates(signed.Status.Certificate))
			Expect(chain[0].Subject.CommonName).To(Equal(render.AgentCommonNamePrefix + cluster))
		}
	})

	It("lets kubectl list, watch and act as a mapped hub user on every cluster through the user-server", func() {
		hubToken := hubUserToken()
		for _, cluster := range clusterNames() {
			By(cluster)
			viewer := userKubeconfig(cluster, "viewer", viewerToken(cluster))
			out, err := testenv.Kubectl(viewer, "get", "namespaces", "-o", "name")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring("namespace/open-cluster-management-agent"), "the managed cluster, not the hub")

			expectWatchSees(viewer, cluster)

			hub := userKubeconfig(cluster, "hub-user", hubToken)
			out, err = testenv.Kubectl(hub, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(Equal("cluster:hub:system:serviceaccount:team:hub-user"))
			_, err = testenv.Kubectl(hub, "get", "namespaces")
			Expect(err).NotTo(HaveOccurred(), "the managed cluster's RBAC for the mapped user applies")
		}
	})

	It("reaches every managed kube-apiserver with konnectivity-client over gRPC and with curl over HTTP CONNECT", func() {
		for _, cluster := range clusterNames() {
			Eventually(func() (string, error) { return grpcHealthz(cluster) }).Should(Equal("ok"), cluster)
			Eventually(func() (string, error) { return curlHealthz(cluster) }).Should(Equal("ok"), cluster)
		}
	})

	It("answers the README's status commands on the hub", func() {
		out := shell("kubectl get managedproxyconfiguration cluster-proxy -o yaml")
		Expect(out).To(ContainSubstring("entrypoint: " + system.EntrypointHost))
		Expect(out).To(MatchRegexp(`status: "True"\n\s+type: Ready\n`), "Ready=True:\n%s", out)
		out = shell("kubectl get clusterproxystatuses -A")
		Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(ContainElements("CLUSTER", "INSTALLED", "AVAILABLE", "PROBED", "HEALTH", "LATENCY"))
		for _, cluster := range clusterNames() {
			Expect(out).To(MatchRegexp(`(?m)^`+cluster+`\s+cluster-proxy\s+`+cluster+`\s+true\s+true\s+True\s+\S+`), out)
		}
		out = shell("kubectl get proxycertificates -A")
		Expect(strings.Fields(strings.SplitN(out, "\n", 2)[0])).To(ContainElements("READY", "SECRET", "ISSUER"))
		for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert"} {
			Expect(out).To(MatchRegexp(`(?m)^`+system.Namespace+`\s+`+name+`\s+True\s+`), out)
		}
		out = shell("kubectl get managedclusters,clusterproxystatuses -A")
		Expect(out).To(ContainSubstring("managedcluster.cluster.open-cluster-management.io/" + system.ProxiedCluster))
	})

	It("shows every cluster healthy with a latency in kubectl-cluster_proxy health", func() {
		out, err := plugin("health")
		Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSpace(out), "\n")
		Expect(strings.Fields(lines[0])).To(Equal([]string{"CLUSTER", "NAME", "INSTALLED", "AVAILABLE", "PROBED", "HEALTH", "LATENCY"}))
		for _, cluster := range clusterNames() {
			Expect(out).To(MatchRegexp(`(?m)^`+cluster+`\s+True\s+True\s+True\s+\S+`), out)
		}
	})

	It("gives hub programs a rest.Config and a probe for each cluster by name (pkg/clusterproxy)", func() {
		resolve := must(clusterproxy.ParseResolve(sys.Resolve))
		proxies := must(clusterproxy.New(ctx(), sys.Env.Hub, clusterproxy.Options{Resolve: resolve}))
		for _, cluster := range clusterNames() {
			base := rest.CopyConfig(managedConfig(cluster))
			// A name that resolves nowhere: only the tunnel can reach the apiserver. Its certificate names localhost.
			base.Host = "https://kubernetes.default.svc"
			base.ServerName = "localhost"
			cfg := must(proxies.RESTConfig(cluster, base))
			ns := must(kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(ctx(), "open-cluster-management-agent", metav1.GetOptions{}))
			Expect(ns.Name).To(Equal("open-cluster-management-agent"))
			result := must(proxies.Probe(ctx(), cluster))
			Expect(result.Healthy).To(BeTrue(), "%s: %s", cluster, result.Message)
			Expect(result.Latency).To(BeNumerically(">", 0))
		}
	})

	It("sends cluster1's agent and klusterlet through the forward proxy over TLS: stopping squid drops only its tunnel, and it comes back", func() {
		cps := &proxyv1alpha1.ClusterProxyStatus{}
		Expect(sys.HubClient.Get(ctx(), types(system.ProxiedCluster, "cluster-proxy"), cps)).To(Succeed())
		Expect(cps.Status.ProxySettings).NotTo(BeNil())
		Expect(cps.Status.ProxySettings.HTTPSProxy).To(Equal(sys.Squid.TLSURL()))
		caSum := sha256.Sum256(sys.Squid.CA())
		Expect(cps.Status.ProxySettings.CABundleFingerprint).To(Equal("SHA256:"+hex.EncodeToString(caSum[:])), "the agent trusts squid's CA")

		// Squid logs a tunnel when it closes: stopping it gracefully writes the agent's and the klusterlet's.
		Expect(sys.Squid.Stop()).To(Succeed())
		Eventually(func(g Gomega) {
			_, err := grpcHealthz(system.ProxiedCluster)
			g.Expect(err).To(HaveOccurred())
		}).Should(Succeed())
		Expect(grpcHealthz(system.DigitCluster)).To(Equal("ok"), "the direct cluster keeps its tunnel")
		Expect(sys.Squid.Start()).To(Succeed())
		Eventually(func() (string, error) { return grpcHealthz(system.ProxiedCluster) }).Should(Equal("ok"))

		tunnels := must(sys.Squid.Tunnels())
		entrypoint := system.EntrypointHost + ":" + itoa(sys.Ports.Agent)
		hub := must(url.Parse(sys.Env.Hub.Host)).Host
		Expect(tunnels).To(ContainElement(squid.Tunnel{Target: entrypoint, TLS: true}), "squid's TLS port carried the agent's tunnel")
		Expect(tunnels).To(ContainElement(squid.Tunnel{Target: hub, TLS: true}),
			"squid's TLS port carried the klusterlet's connection to the hub kube-apiserver")
		Expect(tunnels).NotTo(ContainElement(squid.Tunnel{Target: hub, TLS: false}), "nothing reached the hub through the plain-HTTP port")
	})

	It("reports a bad proxy URL by its field and keeps the running agent", func() {
		setProxy("http//no-scheme")
		Eventually(func(g Gomega) {
			cps := &proxyv1alpha1.ClusterProxyStatus{}
			g.Expect(sys.HubClient.Get(ctx(), types(system.ProxiedCluster, "cluster-proxy"), cps)).To(Succeed())
			c := meta.FindStatusCondition(cps.Status.Conditions, proxyv1alpha1.ConditionProxySettingsApplied)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Message).To(ContainSubstring("spec.proxyConfig.httpsProxy"))
		}).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(agentWorkHTTPSProxy(g)).To(Equal(sys.Squid.TLSURL()), "the agent ManifestWork keeps the last good proxy")
			body, err := grpcHealthz(system.ProxiedCluster)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(body).To(Equal("ok"))
		}, "3s", "500ms").Should(Succeed())
	})

	It("takes a new proxy route to the running agent: it reconnects through the new proxy", func() {
		second := must(squid.Start(filepath.Join(workDir, "squid-2"), squid.Options{Hosts: map[string]string{system.EntrypointHost: "127.0.0.1"}}))
		defer func() { Expect(second.Stop()).To(Succeed()) }()
		// The new route is plain HTTP to the proxy, the other way an agent reaches one.
		setProxy(second.URL())
		expectAgentRunsWithProxy(second.URL())
		Eventually(func(g Gomega) {
			// The old route is gone: the agent now goes through the second proxy only.
			g.Expect(sys.Squid.Stop()).To(Succeed())
			body, err := grpcHealthz(system.ProxiedCluster)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(body).To(Equal("ok"))
		}).Should(Succeed())
		Expect(sys.Squid.Start()).To(Succeed())
		setProxy(sys.Squid.TLSURL())
		expectAgentRunsWithProxy(sys.Squid.TLSURL())
		Expect(second.Stop()).To(Succeed())
		Expect(second.Tunnels()).To(ContainElement(squid.Tunnel{Target: system.EntrypointHost + ":" + itoa(sys.Ports.Agent), TLS: false}),
			"the second squid carried the agent's tunnel on its plain-HTTP port")
	})

	It("rotates the CA while clients loop over every cluster, with zero failed requests", func() {
		tokens := map[string]string{}
		for _, cluster := range clusterNames() {
			tokens[cluster] = userKubeconfig(cluster, "loop", viewerToken(cluster))
		}
		for _, cluster := range clusterNames() {
			Eventually(func() (string, error) { return grpcHealthz(cluster) }).Should(Equal("ok"), "%s is up before the rotation", cluster)
		}
		oldCA := currentCA()
		var ok, failures atomic.Int64
		var mu sync.Mutex
		var errs []string
		loopCtx, stop := context.WithCancel(ctx())
		var wg sync.WaitGroup
		for cluster, kc := range tokens {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for loopCtx.Err() == nil {
					if _, err := testenv.Kubectl(kc, "get", "namespace", "default", "-o", "name"); err != nil {
						failures.Add(1)
						mu.Lock()
						errs = append(errs, cluster+": "+err.Error())
						mu.Unlock()
					} else {
						ok.Add(1)
					}
				}
			}()
		}
		Eventually(ok.Load).Should(BeNumerically(">", 4))

		// The README's command, as written.
		Expect(shell(`kubectl annotate managedproxyconfiguration cluster-proxy proxy.open-cluster-management.io/rotate-ca="$(date +%s)" --overwrite`)).
			To(ContainSubstring("managedproxyconfiguration.proxy.open-cluster-management.io/cluster-proxy annotated"))

		Eventually(func(g Gomega) {
			newCA := currentCA()
			g.Expect(newCA.Equal(oldCA)).To(BeFalse(), "a new CA")
			live := &proxyv1alpha1.ManagedProxyConfiguration{}
			g.Expect(sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), live)).To(Succeed())
			g.Expect(live.Status.Signer.BundleFingerprints).To(Equal([]string{certs.Fingerprint(newCA)}), "the old CA left the bundle")
			for _, cluster := range clusterNames() {
				g.Expect(agentCertificate(g, cluster).CheckSignatureFrom(newCA)).To(Succeed(), "%s's agent certificate", cluster)
			}
			for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert"} {
				s := &corev1.Secret{}
				g.Expect(sys.HubClient.Get(ctx(), types(system.Namespace, name), s)).To(Succeed())
				leaf := must(certs.ParseCertificates(s.Data["tls.crt"]))[0]
				g.Expect(leaf.CheckSignatureFrom(newCA)).To(Succeed(), name)
			}
		}, 5*time.Minute, time.Second).Should(Succeed())
		Eventually(ok.Load).Should(BeNumerically(">", ok.Load()+4), "requests keep flowing after the rotation")
		stop()
		wg.Wait()
		Expect(errs).To(BeEmpty())
		Expect(failures.Load()).To(BeZero())
	})

	It("removes the agent from a cluster and its status from the hub when its add-on is removed", func() {
		cluster := system.DigitCluster
		namespace := agentNamespace(Default, cluster)
		Expect(namespace).NotTo(BeEmpty(), "the add-on reports where its agent is installed")
		deployment := types(namespace, render.AgentDeploymentName)
		Expect(managedClient(cluster).Get(ctx(), deployment, &appsv1.Deployment{})).To(Succeed(), "the agent Deployment is there before the removal")
		Expect(sys.HubClient.Get(ctx(), types(cluster, "cluster-proxy"), &proxyv1alpha1.ClusterProxyStatus{})).To(Succeed())
		Expect(sys.HubClient.Get(ctx(), types(cluster, render.AgentWorkName), &workv1.ManifestWork{})).To(Succeed())

		Expect(sys.HubClient.Delete(ctx(), &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: "cluster-proxy"}})).To(Succeed())
		Eventually(func(g Gomega) {
			err := managedClient(cluster).Get(ctx(), deployment, &appsv1.Deployment{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the agent Deployment is gone from the managed cluster: %v", err)
			err = sys.HubClient.Get(ctx(), types(cluster, "cluster-proxy"), &proxyv1alpha1.ClusterProxyStatus{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the ClusterProxyStatus is gone: %v", err)
			err = sys.HubClient.Get(ctx(), types(cluster, render.AgentWorkName), &workv1.ManifestWork{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the agent ManifestWork is gone: %v", err)
		}).Should(Succeed())
		Eventually(func() bool {
			for _, p := range sys.Launcher.Pods() {
				if p.Cluster == cluster && p.Running {
					return true
				}
			}
			return false
		}).Should(BeFalse(), "the agent process stopped with its Deployment")
	})

	It("cleans the hub when the ManagedProxyConfiguration is deleted", func() {
		Expect(sys.HubClient.Delete(ctx(), &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}})).To(Succeed())
		Eventually(func(g Gomega) {
			for _, name := range []string{"proxy-server-ca", "proxy-client", "proxy-server", "agent-server"} {
				err := sys.HubClient.Get(ctx(), types(system.Namespace, name), &corev1.Secret{})
				g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", name, err)
			}
			err := sys.HubClient.Get(ctx(), types("", "cluster-proxy"), &addonv1alpha1.ClusterManagementAddOn{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the ClusterManagementAddOn is gone: %v", err)
		}).Should(Succeed())
	})
})

// expectWatchSees starts kubectl get --watch through the user-server and creates namespaces on the managed cluster
// until the watch reports one.
func expectWatchSees(kubeconfig, cluster string) {
	GinkgoHelper()
	mc := managedClient(cluster)
	create := func(c context.Context, name string) error {
		return mc.Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	Expect(testenv.WatchSeesNamespace(ctx(), kubeconfig, create, 3*time.Second, timeout)).To(Succeed())
}

// expectAgentRunsWithProxy waits until cluster1's agent Deployment carries proxyURL and the agent process started
// from it has its tunnel up: the rollout is over, not merely begun.
func expectAgentRunsWithProxy(proxyURL string) {
	var since time.Time
	Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(managedClient(system.ProxiedCluster).Get(ctx(), types(agentNamespace(g, system.ProxiedCluster), render.AgentDeploymentName), d)).To(Succeed())
		g.Expect(httpsProxy(d)).To(Equal(proxyURL), "the Deployment carries the new proxy")
		if since.IsZero() {
			since = time.Now()
		}
	}).Should(Succeed())
	Eventually(func(g Gomega) {
		var started time.Time
		for _, p := range sys.Launcher.Pods() {
			if p.Cluster == system.ProxiedCluster && p.Running {
				started = p.StartedAt
			}
		}
		g.Expect(started).NotTo(BeZero())
		body, err := grpcHealthz(system.ProxiedCluster)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(body).To(Equal("ok"))
		// The process running now was started from the new template (or had already been when the Deployment
		// changed, which the launcher answers with a restart).
		g.Expect(started.After(since.Add(-5 * time.Second))).To(BeTrue())
	}).Should(Succeed())
}

// httpsProxy is the HTTPS_PROXY of the agent container of d.
func httpsProxy(d *appsv1.Deployment) string {
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "HTTPS_PROXY" {
			return e.Value
		}
	}
	return ""
}

// agentWorkHTTPSProxy is the HTTPS_PROXY of the agent Deployment in cluster1's ManifestWork on the hub: what the
// operator deploys, before the work agent applies it ("" without a Deployment).
func agentWorkHTTPSProxy(g Gomega) string {
	work := &workv1.ManifestWork{}
	g.Expect(sys.HubClient.Get(ctx(), types(system.ProxiedCluster, render.AgentWorkName), work)).To(Succeed())
	for _, m := range work.Spec.Workload.Manifests {
		d := &appsv1.Deployment{}
		g.Expect(json.Unmarshal(m.Raw, d)).To(Succeed())
		if d.Kind == "Deployment" {
			return httpsProxy(d)
		}
	}
	return ""
}

// setProxy points cluster1's AddOnDeploymentConfig at proxyURL.
func setProxy(proxyURL string) {
	Eventually(func(g Gomega) {
		adc := &addonv1alpha1.AddOnDeploymentConfig{}
		g.Expect(sys.HubClient.Get(ctx(), types(system.ProxiedCluster, system.ProxyConfigName), adc)).To(Succeed())
		adc.Spec.ProxyConfig.HTTPSProxy = proxyURL
		g.Expect(sys.HubClient.Update(ctx(), adc)).To(Succeed())
	}).Should(Succeed())
}

// currentCA is the signer's current CA.
func currentCA() *x509.Certificate {
	s := &corev1.Secret{}
	Expect(sys.HubClient.Get(ctx(), types(system.Namespace, proxyv1alpha1.SignerSecretName), s)).To(Succeed())
	return must(certs.ParseCertificates(s.Data["ca.crt"]))[0]
}

// agentNamespace is where the agent of cluster is installed, as its add-on reports (an AddOnDeploymentConfig
// defaults agentInstallNamespace to open-cluster-management-agent-addon).
func agentNamespace(g Gomega, cluster string) string {
	mca := &addonv1alpha1.ManagedClusterAddOn{}
	g.Expect(sys.HubClient.Get(ctx(), types(cluster, "cluster-proxy"), mca)).To(Succeed())
	return mca.Status.Namespace
}

// agentCertificate is the agent certificate the klusterlet wrote on the managed cluster.
func agentCertificate(g Gomega, cluster string) *x509.Certificate {
	s := &corev1.Secret{}
	g.Expect(managedClient(cluster).Get(ctx(), types(agentNamespace(g, cluster), render.AgentCertSecretName), s)).To(Succeed())
	chain, err := certs.ParseCertificates(s.Data["tls.crt"])
	g.Expect(err).NotTo(HaveOccurred())
	return chain[0]
}
