package controllers_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/addonapi"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// countsDelay is the manager's wait before it counts clusters again: short, so the counting specs are quick.
const countsDelay = 300 * time.Millisecond

var (
	ocmHub    *testenv.Hub // of the OCM release OCM_HUB_RELEASE names (v1.2 when unset)
	env       *envtest.Environment
	k8s       client.Client // the test's own client, uncached
	k8sWatch  client.WithWatch
	fakeClock *clocktesting.FakeClock
	requests  testenv.Requests // the manager's API requests
	// managerNamespace stands for the manager's own namespace, where OCM's ocm-tls-profile ConfigMap is read.
	managerNamespace = "cluster-proxy-manager"
	mgrClient        client.Client // the manager's cached client
	tunnels          *fakeTunnels  // what the proxy-servers see of each cluster's tunnel
	gc               *process.Process
	cancel           context.CancelFunc
	mgrDone          chan struct{} // closed when the manager has stopped
	managerLog       = &logWatch{} // the manager's log lines that carry a watched word
)

// logWatch is a writer under the manager's logger that keeps every line holding one of the words a spec watches for
// (a credential it must never log). zap writes one line per Write.
type logWatch struct {
	mu    sync.Mutex
	words []string
	hits  []string
}

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, word := range w.words {
		if bytes.Contains(p, []byte(word)) {
			w.hits = append(w.hits, string(p))
			break
		}
	}
	return len(p), nil
}

// watch starts keeping the lines that hold any of words, from now on.
func (w *logWatch) watch(words ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.words = append(w.words, words...)
}

// lines are the lines kept so far.
func (w *logWatch) lines() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.hits)
}

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	// Every spec in a random order (Ordered containers keep theirs): no spec may depend on another's objects.
	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.RandomizeAllSpecs = true
	RunSpecs(t, "Controllers Suite", suiteConfig, reporterConfig)
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(GinkgoWriter, managerLog)), zap.UseDevMode(true)))
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run through 'make test', or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)")

	release, err := testenv.OCMReleaseFromEnv()
	Expect(err).NotTo(HaveOccurred())
	ocmHub, err = testenv.NewHubOf(release, GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	env = ocmHub.Environment
	cfg, err := ocmHub.Start()
	Expect(err).NotTo(HaveOccurred())
	addOnAPI, err := addonapi.DiscoverFor(cfg)
	Expect(err).NotTo(HaveOccurred())
	Expect(addOnAPI).To(Equal(map[testenv.OCMRelease]addonapi.Version{testenv.OCM10: addonapi.V1alpha1, testenv.OCM12: addonapi.V1beta1}[release]),
		"the add-on API the manager speaks on an OCM %s hub", release)
	GinkgoWriter.Printf("OCM %s hub: the manager speaks the add-on API as %s\n", release, addOnAPI)

	hubScheme := scheme.New()
	k8sWatch, err = client.NewWithWatch(cfg, client.Options{Scheme: hubScheme})
	Expect(err).NotTo(HaveOccurred())
	k8s = k8sWatch

	// The real garbage collector, so owner references are proven by deletion, not by inspection.
	gc, err = testenv.StartGarbageCollector(env, filepath.Join(GinkgoT().TempDir(), "kube-controller-manager.log"))
	Expect(err).NotTo(HaveOccurred())

	mgrCfg := rest.CopyConfig(cfg)
	mgrCfg.WrapTransport = requests.Wrap
	fakeClock = clocktesting.NewFakeClock(time.Now())
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 hubScheme,
		Cache:                  controllers.CacheOptions(controllers.Namespaces{}),
		NewCache:               addonapi.NewCacheFunc(addOnAPI),
		NewClient:              controllers.NewClientFunc(addOnAPI),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	Expect(err).NotTo(HaveOccurred())
	var ctx context.Context
	ctx, cancel = context.WithCancel(context.Background())
	tunnels = newFakeTunnels()
	mgrClient = mgr.GetClient()
	Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNamespace}})).To(Succeed())
	Expect(controllers.Setup(ctx, mgr, controllers.Options{Clock: fakeClock, Tunnels: tunnels, CountsDelay: countsDelay,
		TLSProfileNamespace: managerNamespace, HubServer: hubServer, AddOnAPI: addOnAPI})).To(Succeed())
	mgrDone = make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(mgrDone)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
		// The manager's requests end before the API server stops, which would otherwise wait for them.
		Eventually(mgrDone, timeout).Should(BeClosed())
	}
	if gc != nil {
		gc.Stop()
	}
	if ocmHub != nil {
		Expect(ocmHub.Stop()).To(Succeed())
	}
})

// expectQuiet waits until the manager has made no write for a second.
func expectQuiet() {
	EventuallyWithOffset(1, testenv.Settled(requests.Writes), timeout, time.Second).Should(BeTrue(), "the manager keeps writing")
}
