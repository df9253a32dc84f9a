//go:build e2e

// Package e2eolm installs the operator as an OLM user does, on the real clusters of internal/localsystem (a hub and
// two managed clusters, cluster1 behind squid): Operator Lifecycle Manager v0.38.0 installed with the chart its module
// ships and run from an image of its programs; bundle images of three releases and a file-based catalog image of
// them, rendered by opm, that the hub's node pulls from a registry; a Subscription whose InstallPlans the suite
// approves. The first release installs, the second replaces it through
// the channel with the tunnels up, the third cannot install and leaves the second running. Run it with
// 'make e2e-olm'.
package e2eolm

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	operatorsv1alpha1 "github.com/operator-framework/api/pkg/operators/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/olm"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/e2esuite"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/requestloop"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

const (
	// firstIndex keeps this suite's clusters apart from 'make run' (1–3), 'make e2e' (11–13) and the realcluster
	// tests (201–204).
	firstIndex = 21
	manager    = "cluster-proxy-addon-manager"
	// leaderLease is the manager's leader-election Lease.
	leaderLease = "cluster-proxy-addon-manager.proxy.open-cluster-management.io"
)

// releases are the catalog's channel: the bundle as it is, a second release, and a third whose manager asks for
// more memory than its limit, which the kube-apiserver refuses.
var releases = []olm.Release{
	{Version: "0.1.0"},
	{Version: "0.2.0"},
	{Version: "0.3.0", Edit: func(csv *operatorsv1alpha1.ClusterServiceVersion) {
		c := &csv.Spec.InstallStrategy.StrategySpec.DeploymentSpecs[0].Spec.Template.Spec.Containers[0]
		c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse("512Mi")
	}},
}

var (
	suite  *e2esuite.Suite
	sys    *localsystem.System
	olmHub client.Client
)

func TestOLM(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "OLM installs and upgrades the operator on real clusters")
}

var _ = BeforeSuite(func() {
	ctrllog.SetLogger(GinkgoLogr)
	SetDefaultEventuallyTimeout(3 * time.Minute)
	SetDefaultEventuallyPollingInterval(time.Second)
	suite = e2esuite.Start("cluster-proxy-e2e-olm", "e2e-olm", firstIndex, 20*time.Minute, func(opts *localsystem.Options) {
		opts.OLM = &localsystem.OLMOptions{Tools: olm.Tools{Dir: filepath.Join(repo.Root(), "bin", "olm")}, Releases: releases,
			PushImage: makeImagePush}
	})
	sys = suite.Sys
	var err error
	olmHub, err = client.New(sys.Hub.Config, client.Options{Scheme: olm.NewScheme()})
	Expect(err).NotTo(HaveOccurred())
})

var _ = ReportAfterEach(func(r SpecReport) { suite.Record(r) })

var _ = AfterSuite(func() { suite.Stop() })

var _ = Describe("The operator installed by OLM", Ordered, func() {
	It("is installed from the catalog: CSV Succeeded, the manager Ready, the sample configuration Ready, every tunnel up", func() {
		By("the package is listed by OLM's package-server, as 'kubectl get packagemanifests' shows it")
		Expect(kubeclient.Kubectl(sys.Hub.Kubeconfig, "get", "packagemanifests", olm.Package, "-o", "jsonpath={.status.catalogSource} {.status.defaultChannel} {.status.channels[0].currentCSV}")).
			To(Equal(olm.CatalogSource + " " + olm.Channel + " " + releases[2].CSVName()))

		Expect(csv(Default, releases[0].CSVName()).Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseSucceeded))
		expectManagerRuns(releases[0].Version)

		By("the hub's node pulled the catalog image, the bundle image for OLM's unpack Job and the CSV's multi-platform manager image (make image-push) from the registry")
		expectPulled(sys.Catalog().Image)
		expectPulled(sys.Catalog().Bundles[releases[0].Version])
		expectPulled(sys.RegistryImage(sys.Catalog().Images[releases[0].Version]))

		mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
		Expect(sys.HubClient.Get(ctx(), client.ObjectKey{Name: proxyv1alpha1.DefaultConfigurationName}, mpc)).To(Succeed())
		Expect(meta.IsStatusConditionTrue(mpc.Status.Conditions, proxyv1alpha1.ConditionReady)).To(BeTrue(), "%v", mpc.Status.Conditions)

		expectEveryClusterAvailable()
		for _, cluster := range sys.Clusters() {
			ns, err := clusterClient(cluster).CoreV1().Namespaces().Get(ctx(), "open-cluster-management-agent", metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), cluster)
			Expect(ns.Name).To(Equal("open-cluster-management-agent"))
		}
	})

	It("replaces the first release by the second through the channel, with every tunnel answering throughout", func() {
		loops := startLoops()
		approve(releases[1])
		Expect(olm.WaitSucceeded(ctx(), olmHub, localsystem.Namespace, releases[1].CSVName(), 5*time.Minute)).To(Succeed())
		expectPulled(sys.Catalog().Bundles[releases[1].Version])
		expectPulled(sys.RegistryImage(sys.Catalog().Images[releases[1].Version]))
		Eventually(func() bool {
			return apierrors.IsNotFound(olmHub.Get(ctx(), client.ObjectKey{Namespace: localsystem.Namespace, Name: releases[0].CSVName()},
				&operatorsv1alpha1.ClusterServiceVersion{}))
		}).Should(BeTrue(), "OLM removes the replaced CSV")
		expectManagerRuns(releases[1].Version)
		expectEveryClusterAvailable()
		stopLoops(loops, "during the upgrade to "+releases[1].Version)
	})

	It("keeps the second release running when the third cannot install, and names the field the kube-apiserver refused", func() {
		loops := startLoops()
		approve(releases[2])
		Eventually(func(g Gomega) {
			got := csv(g, releases[2].CSVName())
			g.Expect(got.Status.Phase).To(Equal(operatorsv1alpha1.CSVPhaseFailed))
			g.Expect(got.Status.Message).To(ContainSubstring("spec.template.spec.containers[0].resources.requests"))
			AddReportEntry("the third release's CSV", string(got.Status.Reason)+": "+got.Status.Message)
		}).WithTimeout(5 * time.Minute).Should(Succeed())
		expectPulled(sys.Catalog().Bundles[releases[2].Version])
		Expect(csv(Default, releases[1].CSVName()).Status.Phase).NotTo(Equal(operatorsv1alpha1.CSVPhaseFailed))
		expectManagerRuns(releases[1].Version)
		expectEveryClusterAvailable()
		stopLoops(loops, "while the third release failed")
	})
})

func ctx() context.Context { return context.Background() }

// approve approves the InstallPlan of r, and reports how often OLM had to be made to resolve again (olm.Approve).
func approve(r olm.Release) {
	GinkgoHelper()
	nudges, err := olm.Approve(ctx(), olmHub, localsystem.Namespace, r.CSVName())
	Expect(err).NotTo(HaveOccurred())
	AddReportEntry("Subscription changes to make OLM resolve again before the InstallPlan of "+r.Version, nudges)
}

// makeImagePush pushes the operator's multi-platform image to ref as its users publish it: make image-push, with the
// programs make e2e-olm built for each platform beforehand (build-static-platforms).
func makeImagePush(c context.Context, ref string) error {
	cmd := exec.CommandContext(c, "make", "--no-print-directory", "-o", "build-static-platforms", "image-push", "IMAGE="+ref, "PUSH_INSECURE=true")
	cmd.Dir = repo.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make image-push IMAGE=%s: %w: %s", ref, err, out)
	}
	return nil
}

// expectPulled expects that the hub's node pulled the image ref from the registry.
func expectPulled(ref string) {
	GinkgoHelper()
	Expect(ref).NotTo(BeEmpty())
	Expect(sys.Registry().Pulled(ctx(), sys.Hub.NodeIP, ref)).To(BeTrue(), "the hub's node pulled %s from the registry", ref)
}

func csv(g Gomega, name string) *operatorsv1alpha1.ClusterServiceVersion {
	GinkgoHelper()
	got := &operatorsv1alpha1.ClusterServiceVersion{}
	g.Expect(olmHub.Get(ctx(), client.ObjectKey{Namespace: localsystem.Namespace, Name: name}, got)).To(Succeed())
	return got
}

// expectManagerRuns waits until the manager Deployment runs version's image, rolled out with a Ready pod, and that
// pod leads: it holds the leader-election Lease.
func expectManagerRuns(version string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(sys.HubClient.Get(ctx(), client.ObjectKey{Namespace: localsystem.Namespace, Name: manager}, d)).To(Succeed())
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(HaveSuffix(":v" + version))
		g.Expect(d.Status.ObservedGeneration).To(Equal(d.Generation))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.ReadyReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.Replicas).To(Equal(*d.Spec.Replicas), "no old pod left")

		pods := &corev1.PodList{}
		g.Expect(sys.HubClient.List(ctx(), pods, client.InNamespace(localsystem.Namespace),
			client.MatchingLabels(d.Spec.Selector.MatchLabels))).To(Succeed())
		var current []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && strings.HasSuffix(p.Spec.Containers[0].Image, ":v"+version) {
				current = append(current, p.Name)
			}
		}
		lease := &coordinationv1.Lease{}
		g.Expect(sys.HubClient.Get(ctx(), client.ObjectKey{Namespace: localsystem.Namespace, Name: leaderLease}, lease)).To(Succeed())
		g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
		// controller-runtime's identity is <hostname>_<uuid>, and a pod's hostname is its name.
		holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
		g.Expect(current).To(ContainElement(holder), "the leader is a pod of %s", version)
	}).Should(Succeed())
}

func expectEveryClusterAvailable() { suite.ExpectEveryClusterAvailable() }

// clusterConfig reaches cluster's kube-apiserver through its tunnel (pkg/clusterproxy), as its admin.
func clusterConfig(cluster string) *rest.Config {
	GinkgoHelper()
	resolve, err := clusterproxy.ParseResolve(sys.Resolve())
	Expect(err).NotTo(HaveOccurred())
	p, err := clusterproxy.New(ctx(), sys.Hub.Config, clusterproxy.Options{Resolve: resolve})
	Expect(err).NotTo(HaveOccurred())
	for _, c := range sys.Managed {
		if c.Name() == cluster {
			base := rest.CopyConfig(c.Config)
			// A name that resolves nowhere on the machine: only the tunnel reaches the kube-apiserver.
			base.Host = "https://kubernetes.default.svc"
			cfg, err := p.RESTConfig(cluster, base)
			Expect(err).NotTo(HaveOccurred())
			return cfg
		}
	}
	Fail("no managed cluster " + cluster)
	return nil
}

func clusterClient(cluster string) kubernetes.Interface {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(clusterConfig(cluster))
	Expect(err).NotTo(HaveOccurred())
	return cs
}

// startLoops starts a request loop through the tunnel of every managed cluster, and waits for its first answers.
func startLoops() map[string]*requestloop.Loop {
	GinkgoHelper()
	loops := map[string]*requestloop.Loop{}
	for _, cluster := range sys.Clusters() {
		l, err := requestloop.Start(clusterConfig(cluster), 200*time.Millisecond)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { l.Stop() })
		loops[cluster] = l
		Eventually(l.Succeeded).Should(BeNumerically(">", 3), cluster)
	}
	return loops
}

// stopLoops stops the loops, reports their figures, and expects no failed request.
func stopLoops(loops map[string]*requestloop.Loop, what string) {
	GinkgoHelper()
	for cluster, l := range loops {
		ok, failures := l.Stop()
		AddReportEntry(cluster+" requests "+what, fmt.Sprintf("%d answered, %d failed", ok, len(failures)))
		for _, f := range failures {
			GinkgoWriter.Printf("    %s %s %s\n", cluster, f.At.Format("15:04:05.000"), f.Err)
		}
		Expect(failures).To(BeEmpty(), "%s: %d answered", cluster, ok)
	}
}
