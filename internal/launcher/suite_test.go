package launcher_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/launcher"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// A hub and a managed control plane (real kube-apiservers), and the real proxy-server and proxy-agent binaries.
var (
	hubEnv, managedEnv       *envtest.Environment
	hubConfig, managedConfig *rest.Config
	binaries                 launcher.Binaries
	workDir                  string
	failed                   bool
)

func TestLauncher(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Launcher Suite")
}

var _ = BeforeSuite(func() {
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(), "run through 'make test', or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)")
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	var err error
	workDir, err = os.MkdirTemp("", "launcher-test-")
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("work folder: %s\n", workDir)

	bin := filepath.Join(workDir, "bin")
	Expect(os.MkdirAll(bin, 0o700)).To(Succeed())
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/proxy-server", "./cmd/proxy-agent")
	build.Dir = testenv.RepoRoot()
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build: %s", out)
	binaries = launcher.Binaries{ProxyServer: filepath.Join(bin, "proxy-server"), ProxyAgent: filepath.Join(bin, "proxy-agent")}

	hubEnv = &envtest.Environment{}
	hubConfig, err = hubEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	managedEnv = &envtest.Environment{}
	managedConfig, err = managedEnv.Start()
	Expect(err).NotTo(HaveOccurred())
})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		failed = true
	}
})

var _ = AfterSuite(func() {
	for _, e := range []*envtest.Environment{managedEnv, hubEnv} {
		if e != nil {
			Expect(e.Stop()).To(Succeed())
		}
	}
	if failed || os.Getenv("KEEP_WORK") != "" {
		GinkgoWriter.Printf("work folder kept: %s\n", workDir)
		return
	}
	Expect(os.RemoveAll(workDir)).To(Succeed())
})
