//go:build e2e

package multicluster_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/multicluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/squid"
)

const (
	proxiedCluster = "cluster1"
	digitCluster   = "1st-cluster"
	testSigner     = "example.io/test-signer"
	mib            = 1 << 20
)

// TestJoinsClustersThroughRealOCM starts a hub and two managed clusters, one behind squid over TLS (an https://
// proxy-url, the proxy's CA appended to the hub's in the bootstrap kubeconfig) and one whose name starts with a digit,
// and checks what the rest of the system relies on: real joins, real ManifestWork delivery, add-on CSRs created by the
// klusterlet, the proxy route, and a clean stop.
func TestJoinsClustersThroughRealOCM(t *testing.T) {
	g := NewWithT(t)
	SetDefaultEventuallyTimeout(time.Minute)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	workDir := t.TempDir()

	// The local system's forward proxy (internal/system), with no hosts of its own: the hub is 127.0.0.1.
	proxy, err := squid.Start(filepath.Join(workDir, "squid"), squid.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = proxy.Stop() })
	begin := time.Now()
	env, err := multicluster.Start(ctx, multicluster.Options{
		Clusters: []multicluster.ClusterSpec{
			{Name: proxiedCluster, Proxy: proxy.TLSURL(), ProxyCA: proxy.CA()},
			{Name: digitCluster},
		},
		WorkDir: filepath.Join(workDir, "env"),
		Log:     testLog{t},
	})
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, filepath.Join(workDir, "env", "logs"))
		}
	})
	g.Expect(err).NotTo(HaveOccurred())
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = env.Stop()
		}
	})
	t.Logf("TIMING start to every cluster joined: %.1fs", time.Since(begin).Seconds())
	logMemory(t, env)

	hub := hubClient(t, env)

	t.Run("every cluster is accepted, joined and Available on the hub", func(t *testing.T) {
		g := NewWithT(t)
		for _, c := range env.Clusters {
			var mc clusterv1.ManagedCluster
			g.Expect(hub.Get(ctx, client.ObjectKey{Name: c.Name}, &mc)).To(Succeed())
			g.Expect(mc.Spec.HubAcceptsClient).To(BeTrue())
			for _, cond := range []string{clusterv1.ManagedClusterConditionHubAccepted, clusterv1.ManagedClusterConditionJoined,
				clusterv1.ManagedClusterConditionAvailable} {
				g.Expect(meta.IsStatusConditionTrue(mc.Status.Conditions, cond)).To(BeTrue(), "cluster %s condition %s", c.Name, cond)
			}
		}
	})

	t.Run("the registration CSRs were signed by kube-controller-manager with the hub's client CA", func(t *testing.T) {
		g := NewWithT(t)
		caPEM, err := os.ReadFile(env.HubClientCA)
		g.Expect(err).NotTo(HaveOccurred())
		roots := x509.NewCertPool()
		g.Expect(roots.AppendCertsFromPEM(caPEM)).To(BeTrue())
		for _, c := range env.Clusters {
			secret := hubKubeconfigSecret(t, c)
			block, _ := pem.Decode(secret.Data["tls.crt"])
			g.Expect(block).NotTo(BeNil(), "cluster %s hub-kubeconfig-secret has a certificate", c.Name)
			cert, err := x509.ParseCertificate(block.Bytes)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			g.Expect(err).NotTo(HaveOccurred(), "cluster %s agent certificate chains to the hub client CA", c.Name)
			g.Expect(cert.Subject.CommonName).To(HavePrefix("system:open-cluster-management:" + c.Name + ":"))
			// KCM's default --cluster-signing-duration is a year; a short-lived CA would have capped it.
			g.Expect(time.Until(cert.NotAfter)).To(BeNumerically(">", 300*24*time.Hour))
		}
	})

	t.Run("a ManifestWork's ConfigMap is applied on each managed cluster", func(t *testing.T) {
		for _, c := range env.Clusters {
			g := NewWithT(t)
			created := time.Now()
			work := configMapWork(c.Name)
			g.Expect(hub.Create(ctx, work)).To(Succeed())
			managed := managedClient(t, c)
			g.Eventually(func(g Gomega) {
				var cm corev1.ConfigMap
				g.Expect(managed.Get(ctx, client.ObjectKey{Namespace: "default", Name: "e2e-work"}, &cm)).To(Succeed())
				g.Expect(cm.Data).To(HaveKeyWithValue("cluster", c.Name))
			}).Should(Succeed())
			applied := time.Since(created)
			g.Eventually(func(g Gomega) {
				g.Expect(hub.Get(ctx, client.ObjectKeyFromObject(work), work)).To(Succeed())
				g.Expect(meta.IsStatusConditionTrue(work.Status.Conditions, workv1.WorkApplied)).To(BeTrue())
				g.Expect(meta.IsStatusConditionTrue(work.Status.Conditions, workv1.WorkAvailable)).To(BeTrue())
			}).Should(Succeed())
			t.Logf("TIMING cluster %s: ManifestWork created -> ConfigMap on the managed apiserver %.2fs, -> Applied and Available %.2fs",
				c.Name, applied.Seconds(), time.Since(created).Seconds())
		}
	})

	t.Run("the klusterlet creates an add-on CSR for a custom signer asked for in ManagedClusterAddOn status", func(t *testing.T) {
		for _, c := range env.Clusters {
			g := NewWithT(t)
			addon := &addonv1alpha1.ManagedClusterAddOn{
				ObjectMeta: metav1.ObjectMeta{Namespace: c.Name, Name: "e2e-addon"},
				Spec:       addonv1alpha1.ManagedClusterAddOnSpec{InstallNamespace: "open-cluster-management-agent-addon"},
			}
			g.Expect(hub.Create(ctx, addon)).To(Succeed())
			addon.Status.Namespace = "open-cluster-management-agent-addon"
			addon.Status.Registrations = []addonv1alpha1.RegistrationConfig{{
				SignerName: testSigner,
				Subject:    addonv1alpha1.Subject{User: "e2e-user", Groups: []string{"e2e-group"}},
			}}
			asked := time.Now()
			g.Expect(hub.Status().Update(ctx, addon)).To(Succeed())
			var csr certificatesv1.CertificateSigningRequest
			g.Eventually(func(g Gomega) {
				var csrs certificatesv1.CertificateSigningRequestList
				g.Expect(hub.List(ctx, &csrs, client.MatchingLabels{
					"open-cluster-management.io/cluster-name": c.Name,
					"open-cluster-management.io/addon-name":   "e2e-addon",
				})).To(Succeed())
				g.Expect(csrs.Items).To(HaveLen(1))
				csr = csrs.Items[0]
			}).Should(Succeed())
			t.Logf("TIMING cluster %s: add-on registration in status -> CSR %s on the hub %.2fs", c.Name, csr.Name, time.Since(asked).Seconds())
			g.Expect(csr.Spec.SignerName).To(Equal(testSigner))
			// Made by the klusterlet with its own hub identity, not by anyone holding the bootstrap credentials.
			g.Expect(csr.Spec.Username).To(HavePrefix("system:open-cluster-management:" + c.Name + ":"))
			block, _ := pem.Decode(csr.Spec.Request)
			g.Expect(block).NotTo(BeNil())
			req, err := x509.ParseCertificateRequest(block.Bytes)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(req.Subject.CommonName).To(Equal("e2e-user"))
			g.Expect(req.Subject.Organization).To(ConsistOf("e2e-group"))
		}
	})

	t.Run("cluster1's klusterlet keeps the route through squid over TLS after the join, 1st-cluster's is direct", func(t *testing.T) {
		g := NewWithT(t)
		// The hub kubeconfig the klusterlet was issued keeps the route and the proxy's CA, so its traffic after the
		// join is proxied too. Squid logs a tunnel only when it closes: the CONNECTs are checked after the stop.
		proxyURL, caData := issuedRoute(t, env.Cluster(proxiedCluster))
		g.Expect(proxyURL).To(Equal(proxy.TLSURL()))
		g.Expect(string(caData)).To(HaveSuffix(string(proxy.CA())), "the hub's CA, then squid's")
		proxyURL, caData = issuedRoute(t, env.Cluster(digitCluster))
		g.Expect(proxyURL).To(BeEmpty())
		g.Expect(string(caData)).NotTo(ContainSubstring(string(proxy.CA())))
	})

	g.Expect(env.Err()).NotTo(HaveOccurred(), "no process of the environment died")
	logMemory(t, env)

	stopBegin := time.Now()
	g.Expect(env.Stop()).To(Succeed())
	stopped = true
	t.Logf("TIMING stop: %.1fs", time.Since(stopBegin).Seconds())
	g.Expect(proxy.Stop()).To(Succeed(), "a graceful stop, which writes the access log")

	t.Run("cluster1's klusterlet reached the hub through squid's TLS port", func(t *testing.T) {
		g := NewWithT(t)
		hubURL, err := url.Parse(env.Hub.Host)
		g.Expect(err).NotTo(HaveOccurred())
		tunnels, err := proxy.Tunnels()
		g.Expect(err).NotTo(HaveOccurred())
		viaTLS := squid.Tunnel{Target: hubURL.Host, TLS: true}
		g.Expect(tunnels).To(ContainElement(viaTLS), "squid logged CONNECTs to the hub apiserver on its TLS port")
		g.Expect(tunnels).To(HaveEach(viaTLS), "and nothing else (the plain-HTTP port was not used)")
		t.Logf("squid logged %d CONNECTs to the hub, all on its TLS port", len(tunnels))
	})
	g.Expect(childProcesses()).To(BeEmpty(), "every process the test started has ended")
	g.Expect(processesMentioning(workDir)).To(BeEmpty(), "no process of the environment is left (not even re-parented ones)")
}

// configMapWork is a ManifestWork for cluster carrying one ConfigMap.
func configMapWork(cluster string) *workv1.ManifestWork {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "e2e-work"},
		Data:       map[string]string{"cluster": cluster},
	}
	return &workv1.ManifestWork{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: "e2e-work"},
		Spec: workv1.ManifestWorkSpec{Workload: workv1.ManifestsTemplate{
			Manifests: []workv1.Manifest{{RawExtension: runtime.RawExtension{Object: cm}}},
		}},
	}
}

func hubClient(t *testing.T, env *multicluster.Env) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.Install, workv1.Install, addonv1alpha1.Install} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(env.Hub, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func managedClient(t *testing.T, c *multicluster.Cluster) client.Client {
	t.Helper()
	cl, err := client.New(c.Config, client.Options{Scheme: clientgoscheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// hubKubeconfigSecret is the klusterlet's hub credentials on its managed cluster.
func hubKubeconfigSecret(t *testing.T, c *multicluster.Cluster) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	key := client.ObjectKey{Namespace: "open-cluster-management-agent", Name: "hub-kubeconfig-secret"}
	if err := managedClient(t, c).Get(context.Background(), key, &s); err != nil {
		t.Fatalf("cluster %s: %v", c.Name, err)
	}
	return &s
}

// issuedRoute is the proxy-url and certificate-authority-data of the hub kubeconfig the klusterlet got after the
// join.
func issuedRoute(t *testing.T, c *multicluster.Cluster) (proxyURL string, caData []byte) {
	t.Helper()
	kc, err := clientcmd.Load(hubKubeconfigSecret(t, c).Data["kubeconfig"])
	if err != nil {
		t.Fatalf("cluster %s: parse issued hub kubeconfig: %v", c.Name, err)
	}
	for _, cl := range kc.Clusters {
		return cl.ProxyURL, cl.CertificateAuthorityData
	}
	t.Fatalf("cluster %s: issued hub kubeconfig has no cluster", c.Name)
	return "", nil
}

// procInfo is what the test reads about a process from /proc.
type procInfo struct {
	pid, ppid int
	comm      string
	cmdline   string
}

func processes() []procInfo {
	entries, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		p := procInfo{pid: pid}
		for _, line := range strings.Split(string(status), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "Name":
				p.comm = strings.TrimSpace(v)
			case "PPid":
				p.ppid, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		p.cmdline = strings.ReplaceAll(string(cmdline), "\x00", " ")
		out = append(out, p)
	}
	return out
}

// memoryKiB reads a process's resident set (Rss) and its proportional share of it (Pss), which splits the pages
// that processes of the same binary share (the three ocm-local processes share most of their 120 MB binary).
func memoryKiB(pid int) (rss, pss int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Rss:":
			rss, _ = strconv.Atoi(f[1])
		case "Pss:":
			pss, _ = strconv.Atoi(f[1])
		}
	}
	return rss, pss
}

// childProcesses lists the test process's children, zombies included.
func childProcesses() []string {
	var out []string
	for _, p := range processes() {
		if p.ppid == os.Getpid() {
			out = append(out, fmt.Sprintf("%d %s", p.pid, p.comm))
		}
	}
	return out
}

// processesMentioning lists processes whose command line mentions s (every process of the environment has its work
// folder in its arguments).
func processesMentioning(s string) []string {
	var out []string
	for _, p := range processes() {
		if p.pid != os.Getpid() && strings.Contains(p.cmdline, s) {
			out = append(out, fmt.Sprintf("%d %s", p.pid, p.comm))
		}
	}
	return out
}

// logMemory logs the memory of the environment's processes per cluster and checks the budget: about 300 MiB per
// managed cluster (kube-apiserver, etcd, klusterlet agent), so that two of them and the hub fit comfortably.
func logMemory(t *testing.T, env *multicluster.Env) {
	t.Helper()
	rssOf, pssOf := map[string]int{}, map[string]int{}
	var detail []string
	totalRSS, totalPSS := 0, 0
	for _, p := range processes() {
		if p.pid == os.Getpid() || !strings.Contains(p.cmdline, env.WorkDir) {
			continue
		}
		owner := "hub"
		for _, c := range env.Clusters {
			if strings.Contains(p.cmdline, filepath.Join(env.WorkDir, "clusters", c.Name)+string(filepath.Separator)) {
				owner = c.Name
			}
		}
		rss, pss := memoryKiB(p.pid)
		rssOf[owner] += rss
		pssOf[owner] += pss
		totalRSS += rss
		totalPSS += pss
		detail = append(detail, fmt.Sprintf("%s/%s=%d", owner, p.comm, pss/1024))
	}
	line := fmt.Sprintf("MEMORY MiB Pss (Rss): total %d (%d)", totalPSS/1024, totalRSS/1024)
	for _, owner := range []string{"hub", proxiedCluster, digitCluster} {
		line += fmt.Sprintf(", %s %d (%d)", owner, pssOf[owner]/1024, rssOf[owner]/1024)
	}
	t.Logf("%s; Pss per process: %s", line, strings.Join(detail, " "))
	for _, c := range env.Clusters {
		if got := pssOf[c.Name] * 1024; got > 400*mib {
			t.Errorf("managed cluster %s uses %d MiB (Pss of kube-apiserver, etcd, klusterlet agent); the budget is about 300",
				c.Name, got/mib)
		}
	}
}

// logTails logs the end of every process log, to explain a failure after the work folder is gone.
func logTails(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 30 {
			lines = lines[len(lines)-30:]
		}
		t.Logf("--- last lines of %s:\n%s", e.Name(), strings.Join(lines, "\n"))
	}
}

// testLog writes the environment's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
