//go:build e2e

// Package e2e runs the whole product as a user runs it, on real Kubernetes clusters of this machine
// (internal/localsystem): a hub and two managed clusters whose pods run, OCM's hub controllers and klusterlets as
// pods, the operator installed by the README's helm install from the image of 'make image' with three proxy-server
// replicas, squid as cluster1's only route to the hub (over TLS, for its klusterlet and its agent), and real clients
// (kubectl, curl, konnectivity-client, the kubectl plugin, pkg/clusterproxy). Run it with 'make e2e'.
package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/e2esuite"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

const (
	timeout  = 2 * time.Minute
	interval = 250 * time.Millisecond
	// firstIndex keeps this suite's clusters apart from 'make run' (1–3) and the realcluster tests (201–204).
	firstIndex = 11
	// workloadNamespace holds the probe workload on every managed cluster.
	workloadNamespace = "default"
)

var (
	suite   *e2esuite.Suite
	sys     *localsystem.System
	workDir string
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "End to end on real clusters")
}

var _ = BeforeSuite(func() {
	ctrllog.SetLogger(GinkgoLogr)
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(interval)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	suite = e2esuite.Start("cluster-proxy-e2e", "e2e", firstIndex, 15*time.Minute, func(opts *localsystem.Options) {
		// The probe Service is reachable through /proxy-service/, as a user allows a service with the chart.
		opts.HelmValues = []string{"userServer.allowedServices[0].namespace=" + workloadNamespace,
			"userServer.allowedServices[0].name=probe", "userServer.allowedServices[0].port=80"}
	})
	sys, workDir = suite.Sys, suite.WorkDir

	By("running the probe workload on every managed cluster")
	probe, err := testenv.ProbeImage(filepath.Join(workDir, "probe"))
	Expect(err).NotTo(HaveOccurred())
	for _, c := range sys.Managed {
		Expect(c.ImportImage(ctx, probe)).To(Succeed())
		deploy, svc := testenv.ProbeWorkload(workloadNamespace)
		Expect(kubeclient.CreateAll(ctx, managedClient(c.Name()), deploy, svc)).To(Succeed())
	}
	for _, c := range sys.Managed {
		Eventually(func(g Gomega) {
			d := &appsv1.Deployment{}
			g.Expect(managedClient(c.Name()).Get(ctx, client.ObjectKey{Namespace: workloadNamespace, Name: "probe"}, d)).To(Succeed())
			g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(1))
		}).Should(Succeed(), c.Name())
	}
})

// The specs share one system and run in this order, a file per capability; each spec leaves the system as it found it,
// but for the last chapter, which takes it apart.
var _ = Describe("The product on real clusters", Ordered, func() {
	install()
	tunnelsAndClients()
	hubAccess()
	records()
	monitoring()
	security()
	clusterProfiles()
	forwardProxy()
	highAvailability()
	rotation()
	configurationAndUpgrades()
	uninstall()
})

var _ = ReportAfterEach(func(r SpecReport) { suite.Record(r) })

var _ = AfterSuite(func() { suite.Stop() })
