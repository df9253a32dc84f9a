//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/soak"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

const (
	// soakWarmUp is how long the loops run before the components' first figures are read.
	soakWarmUp = 30 * time.Second
	// soakSettle is how long the system runs after the last fault before its end figures are read.
	soakSettle = time.Minute
	// maxAllAgentsBack bounds the time from the last fault's end until every agent is on every replica again.
	maxAllAgentsBack = 30 * time.Second
	// soakCredentialsTTL is how long the soak's pkg/clusterproxy reuses the Secrets it read. The local system keeps an
	// earlier CA 45 s after its last use (--ca-rollover-grace), less than the client's default minute.
	soakCredentialsTTL = 10 * time.Second
	// soakCredentialsRefresh is how often the soak's credential files are written again from the hub, as the kubelet
	// updates a mounted Secret; soakTokenRefresh how often the viewer tokens (valid an hour) are renewed.
	soakCredentialsRefresh = 5 * time.Second
	soakTokenRefresh       = 20 * time.Minute
	// managerMetricsPort serves the manager's /metrics (the chart's --metrics-bind-address).
	managerMetricsPort = 8080
	// managerEventsController is the reporting controller of the manager's Events.
	managerEventsController = "cluster-proxy-operator"
)

// soak: random faults under load for SOAK_DURATION (make soak), drawn from SOAK_SEED, on the clusters of make e2e,
// with a report (internal/testsupport/soak) written to SOAK_OUT and its goals checked last. make e2e leaves it out by
// its label; it needs nothing of the other specs.
var _ = Describe("soak", Label("soak"), Ordered, func() {
	It("answers through every way in and keeps every stream through random faults, brings every agent back to every replica, and ends as it began", func(spec SpecContext) {
		settings := soakSettingsFromEnv()
		GinkgoWriter.Printf("SOAK_SEED=%d (make soak SOAK_SEED=%d draws the same faults), SOAK_DURATION=%s, SOAK_OUT=%s\n",
			settings.seed, settings.seed, settings.duration, settings.out)
		AddReportEntry("SOAK_SEED", settings.seed)
		expectAgentsOnEveryReplica(3)
		expectEveryClusterAvailable()

		By("running request loops and long-lived streams through every way in to every cluster; a stream that ends is replaced, one that hangs is closed and replaced")
		faults := newSoakSystem()
		creds := followCredentials(filepath.Join(workDir, "soak-credentials"))
		resolve := must(clusterproxy.ParseResolve(sys.Resolve()))
		p := must(clusterproxy.New(spec, sys.Hub.Config, clusterproxy.Options{Resolve: resolve, CredentialsTTL: soakCredentialsTTL}))
		began := time.Now()
		ways := everyWay(func(cluster string) map[string]wayIn { return soakWays(p, creds, cluster) })
		requests := startRequestLoops(ways)
		streams := keepStreams(streamSlots(ways))
		time.Sleep(soakWarmUp)
		// What cannot be measured is reported, and fails the spec, after the report is written.
		var problems []string
		measure := func(what string, err error) {
			if err != nil {
				problems = append(problems, what+": "+err.Error())
			}
		}
		startUsage, err := componentUsage()
		measure("the components' figures at the start", err)
		startState := must(systemState())

		By(fmt.Sprintf("injecting random faults for %s", settings.duration))
		run := soak.NewScheduler(settings.seed, soakKinds).Run(spec, clock.RealClock{}, settings.duration, faults.inject)
		run = append(run, faults.restore(spec, rand.New(rand.NewPCG(settings.seed, math.MaxUint64)))...)
		allBack := untilAllAgentsBack(3 * time.Minute)

		By("letting the system settle, then reading its end state")
		time.Sleep(soakSettle)
		endUsage, err := componentUsage()
		measure("the components' figures at the end", err)
		measure("the streams' last hang probe", streams.finish())
		var measuredLoops []soak.Loop
		for name, l := range requests {
			ok, failures := l.Stop()
			measuredLoops = append(measuredLoops, soak.Loop{Way: name.way, Cluster: name.cluster, Answered: ok, Failures: failures})
		}
		ended := time.Now()
		awaitAvailable(3 * time.Minute)
		endState, err := systemState()
		measure("the end state", err)
		events, err := managerEvents(began)
		measure("the manager's Events", err)

		report := soak.Build(soak.Measured{
			Seed: settings.seed, Began: began, Ended: ended, Faults: run, Loops: measuredLoops,
			Streams: streams.book.Streams(), FailedStreamStarts: streams.book.FailedStarts(),
			AllAgentsBack: allBack, ManagerEvents: events, StartUsage: startUsage, EndUsage: endUsage,
			StartState: startState, EndState: endState, Problems: problems,
		})
		plot := must(report.Write(settings.out))
		table := report.Table()
		GinkgoWriter.Println(table)
		AddReportEntry("soak report", table)
		AddReportEntry("soak report files", settings.out+", "+plot)

		Expect(report.Shortfalls(soak.Goals{Excused: soakExcused, AllAgentsBack: maxAllAgentsBack})).To(BeEmpty(),
			"the soak fell short; its report is %s", settings.out)
	})
})

// soakSettings are make soak's variables.
type soakSettings struct {
	duration time.Duration
	seed     uint64
	out      string
}

// soakSettingsFromEnv reads SOAK_DURATION (default 10m), SOAK_SEED (default: from the clock) and SOAK_OUT (default
// bin/soak.json).
func soakSettingsFromEnv() soakSettings {
	GinkgoHelper()
	s := soakSettings{duration: 10 * time.Minute, seed: uint64(time.Now().UnixNano()), out: filepath.Join(repo.Root(), "bin", "soak.json")}
	if v := os.Getenv("SOAK_DURATION"); v != "" {
		s.duration = must(time.ParseDuration(v))
	}
	if v := os.Getenv("SOAK_SEED"); v != "" {
		s.seed = must(strconv.ParseUint(v, 10, 64))
	}
	if v := os.Getenv("SOAK_OUT"); v != "" {
		s.out = v
	}
	return s
}

// soakExcused says which faults may fail a request through way. A network cut (5 to 30 s) fails every way in to its
// cluster until its link is back: a request gives up after 10 s. A process killed without notice fails the requests a
// client that does not try again had sent to it, or sends before the Service knows it is gone; pkg/clusterproxy, the
// gRPC frontend's client, tries a refused connection again. No other fault may fail a request: a forward proxy's
// restart, which takes every agent of its cluster off every replica at once, is waited out by the proxy-servers.
func soakExcused(way, kind string) bool {
	switch kind {
	case faultNetworkCut:
		return true
	case faultServerKill, faultAgentKill:
		return way != wayGRPC
	}
	return false
}

// soakWays are the ways in to cluster of the soak. Its clients follow the credentials on the hub as a long-running
// hub program that mounts their Secrets does: pkg/clusterproxy (p) reads them again every soakCredentialsTTL, the TLS
// to the HTTP-CONNECT frontend and to the user-server reads files kept in step with the Secrets (creds), and the
// user-server's token is a file renewed before it expires. A client that fixes its trust when it starts fails after
// two CA rotations, which says nothing of the product. The streams through the user-server start with a kubeconfig
// the plugin wrote, as a person's do, holding the CA bundle and token of when each starts, as the plugin would write
// them then.
func soakWays(p *clusterproxy.Client, creds *followedCredentials, cluster string) map[string]wayIn {
	GinkgoHelper()
	base := rest.CopyConfig(managedConfig(cluster))
	base.Host = "https://kubernetes.default.svc"
	kubeconfig := userRESTConfig(userKubeconfig(cluster, "soak", viewerToken(cluster)))
	user := &rest.Config{Host: kubeconfig.Host, BearerTokenFile: creds.tokenFiles[cluster],
		Transport: utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: creds.bundle.ClientConfig(kubeconfig.ServerName)})}
	grpc := must(p.RESTConfig(cluster, base))
	hub := must(clusterproxy.RESTConfigViaHub(rest.CopyConfig(sys.Hub.Config), cluster))
	return map[string]wayIn{
		wayUserServer: {requests: user, streams: func() (*rest.Config, error) { return creds.now(kubeconfig, cluster) }},
		wayGRPC:       {requests: grpc, streams: always(grpc)},
		// client-go's upgrade transports use cfg.Proxy, which this way has not.
		wayHTTPConnect: {requests: httpConnectConfigWith(cluster, base, creds.client.ClientConfig(frontendServerName))},
		wayHub:         {requests: hub, streams: always(hub)},
	}
}

// followedCredentials are the hub's proxy-client pair and CA bundle, and a viewer token of every cluster, as files
// kept in step with the hub, read through tlsreload and client-go's token file.
type followedCredentials struct {
	// client presents the proxy-client pair and trusts the bundle; bundle only trusts it.
	client, bundle *tlsreload.Source
	// caFile holds the bundle; tokenFiles the tokens by cluster.
	caFile     string
	tokenFiles map[string]string
}

// followCredentials writes the credentials into dir and keeps them in step with the hub for the rest of the spec.
func followCredentials(dir string) *followedCredentials {
	GinkgoHelper()
	cert, key, ca, err := sys.HubClientFiles(ctx(), dir)
	Expect(err).NotTo(HaveOccurred())
	c := &followedCredentials{client: must(tlsreload.New(cert, key, ca)), bundle: must(tlsreload.New("", "", ca)), caFile: ca,
		tokenFiles: map[string]string{}}
	for _, cluster := range clusterNames() {
		c.tokenFiles[cluster] = filepath.Join(dir, "token-"+cluster)
		Expect(writeFileAtomically(c.tokenFiles[cluster], []byte(viewerToken(cluster)))).To(Succeed())
	}
	following, stop := context.WithCancel(ctx())
	DeferCleanup(stop)
	go c.follow(following, dir)
	return c
}

// follow writes the files again every soakCredentialsRefresh, and reloads them, until c ends. A Secret the operator
// is issuing again can be missing for a moment: the files then keep the last ones, as a mounted Secret does.
func (f *followedCredentials) follow(c context.Context, dir string) {
	renewed := time.Now()
	for {
		select {
		case <-c.Done():
			return
		case <-time.After(soakCredentialsRefresh):
		}
		if _, _, _, err := sys.HubClientFiles(c, dir); err == nil {
			_, _ = f.client.Reload()
			_, _ = f.bundle.Reload()
		}
		if time.Since(renewed) < soakTokenRefresh {
			continue
		}
		renewed = time.Now()
		for cluster, file := range f.tokenFiles {
			cs, err := kubernetes.NewForConfig(managedConfig(cluster))
			if err != nil {
				continue
			}
			if tok, err := kubeclient.ServiceAccountToken(c, cs, "default", "viewer", time.Hour); err == nil {
				_ = writeFileAtomically(file, []byte(tok))
			}
		}
	}
}

// now is kubeconfig with the CA bundle and cluster's token the files hold now.
func (f *followedCredentials) now(kubeconfig *rest.Config, cluster string) (*rest.Config, error) {
	ca, err := os.ReadFile(f.caFile)
	if err != nil {
		return nil, err
	}
	tok, err := os.ReadFile(f.tokenFiles[cluster])
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(kubeconfig)
	cfg.CAFile, cfg.CAData = "", ca
	cfg.BearerTokenFile, cfg.BearerToken = "", string(tok)
	return cfg, nil
}

// writeFileAtomically replaces path with data, so that a reader sees the old content or the new, never a part.
func writeFileAtomically(path string, data []byte) error {
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// untilAllAgentsBack waits up to within for every agent to be on every replica, and returns when it saw them so;
// zero if it did not.
func untilAllAgentsBack(within time.Duration) time.Time {
	var back time.Time
	g := NewGomega(func(string, ...int) {})
	g.Eventually(func(g Gomega) {
		agentsOnEveryReplica(g, 3)
		back = time.Now()
	}).WithTimeout(within).WithPolling(time.Second).Should(Succeed())
	return back
}

// awaitAvailable waits up to within for every cluster's ClusterProxyStatus and add-on to say Available; the end state
// records what it finds either way.
func awaitAvailable(within time.Duration) {
	g := NewGomega(func(string, ...int) {})
	g.Eventually(func(g Gomega) {
		states, err := sys.States(ctx())
		g.Expect(err).NotTo(HaveOccurred())
		for _, st := range states {
			g.Expect(st.Available && st.AddOnAvailable == metav1.ConditionTrue).To(BeTrue(), st.Name)
		}
	}).WithTimeout(within).WithPolling(2 * time.Second).Should(Succeed())
}

// componentUsage reads the goroutines and resident memory of the manager, the proxy-servers and each cluster's agents
// from their /metrics, through the kube-apiserver's proxy to each pod.
func componentUsage() ([]soak.Usage, error) {
	hub, err := kubernetes.NewForConfig(sys.Hub.Config)
	if err != nil {
		return nil, err
	}
	var out []soak.Usage
	read := func(component string, cs kubernetes.Interface, c client.Client, namespace string, labels map[string]string, port int) error {
		pods, err := runningPods(ctx(), c, namespace, labels)
		if err != nil {
			return err
		}
		u := soak.Usage{Component: component}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning {
				continue // a pod that cannot start (its Secret missing, say) has no figures; the end state tells
			}
			raw, err := cs.CoreV1().Pods(namespace).ProxyGet("http", p.Name, strconv.Itoa(port), "/metrics", nil).DoRaw(ctx())
			if err != nil {
				return fmt.Errorf("/metrics of %s pod %s: %w", component, p.Name, err)
			}
			goroutines, rss, err := soak.ProcessFigures(raw)
			if err != nil {
				return fmt.Errorf("/metrics of %s pod %s: %w", component, p.Name, err)
			}
			u.Pods++
			u.Goroutines += goroutines
			u.RSSBytes += rss
		}
		out = append(out, u)
		return nil
	}
	if err := read("manager", hub, sys.HubClient, localsystem.Namespace, managerLabels, managerMetricsPort); err != nil {
		return nil, err
	}
	serverHealth := int(contract.PortsOf(&proxyv1alpha1.ManagedProxyConfiguration{}).HealthServer)
	if err := read("proxy-servers", hub, sys.HubClient, localsystem.Namespace, proxyServerLabels, serverHealth); err != nil {
		return nil, err
	}
	for _, cluster := range clusterNames() {
		cs, err := kubernetes.NewForConfig(managedConfig(cluster))
		if err != nil {
			return nil, err
		}
		if err := read("agents of "+cluster, cs, managedClient(cluster), agentNamespace(Default, cluster), agentLabels, contract.AgentHealthPort); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// systemState describes what must be the same after the soak as before it: the ManagedProxyConfiguration's conditions
// (type, status, reason), signer type and agent arguments, every cluster's availability, and how many Leases, Secrets
// and ManifestWorks the operator's namespace and every cluster namespace hold (the soak's own Provided CA Secret left
// out).
func systemState() (map[string]string, error) {
	state := map[string]string{}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := sys.HubClient.Get(ctx(), types("", proxyv1alpha1.DefaultConfigurationName), mpc); err != nil {
		return nil, err
	}
	for _, c := range mpc.Status.Conditions {
		state["ManagedProxyConfiguration condition "+c.Type] = fmt.Sprintf("%s (%s)", c.Status, c.Reason)
	}
	state["ManagedProxyConfiguration signer"] = string(mpc.Spec.Authentication.Signer.Type)
	state["agents' additionalArgs"] = fmt.Sprint(mpc.Spec.ProxyAgent.AdditionalArgs)
	states, err := sys.States(ctx())
	if err != nil {
		return nil, err
	}
	for _, st := range states {
		state["cluster "+st.Name] = fmt.Sprintf("Available %t, add-on Available %s", st.Available, st.AddOnAvailable)
	}
	kinds := map[string]string{"lease.coordination.k8s.io": "Leases", "secret": "Secrets", "manifestwork.work.open-cluster-management.io": "ManifestWorks"}
	for _, ns := range append([]string{localsystem.Namespace}, clusterNames()...) {
		names, err := kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "leases,secrets,manifestworks", "-n", ns, "-o", "name")
		if err != nil {
			return nil, err
		}
		counts := map[string]int{}
		for _, name := range strings.Fields(names) {
			if ns == localsystem.Namespace && name == "secret/"+soakProvidedCASecret {
				continue
			}
			kind, _, _ := strings.Cut(name, "/")
			counts[kind]++
		}
		for kind, plural := range kinds {
			state[plural+" in "+ns] = strconv.Itoa(counts[kind])
		}
	}
	return state, nil
}

// managerEvents counts the Events the manager emitted since since, by reason: what it re-issued, rolled and
// repaired.
func managerEvents(since time.Time) (map[string]int, error) {
	cs, err := kubernetes.NewForConfig(sys.Hub.Config)
	if err != nil {
		return nil, err
	}
	list, err := cs.EventsV1().Events("").List(ctx(), metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range list.Items {
		if e.ReportingController != managerEventsController {
			continue
		}
		last, n := e.EventTime.Time, 1
		if e.Series != nil {
			last, n = e.Series.LastObservedTime.Time, int(e.Series.Count)
		}
		if last.IsZero() {
			last = e.DeprecatedLastTimestamp.Time
		}
		if !last.Before(since) {
			out[e.Reason] += n
		}
	}
	return out, nil
}
