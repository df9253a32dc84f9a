package helm

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// TestManagerLeavesTheHelmInstalledAddOnAlone runs the manager against what 'helm install' put on an envtest hub:
// the chart's ClusterManagementAddOn, which Helm owns, keeps Helm's install strategy and labels, and once the
// configuration is Ready the manager writes nothing, neither at steady state, nor when a user labels the add-on, nor
// after a 'helm upgrade' switches the install strategy.
func TestManagerLeavesTheHelmInstalledAddOnAlone(t *testing.T) {
	g := NewWithT(t)
	env, _ := startHub(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	g.Expect(err).NotTo(HaveOccurred())
	kcPath, err := testenv.AdminKubeconfig(env, "helm-user", filepath.Join(t.TempDir(), "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	helm := func(args ...string) {
		t.Helper()
		out, errOut, err := runHelm(t, append(args, "--kubeconfig", kcPath)...)
		g.Expect(err).NotTo(HaveOccurred(), "helm %v:\n%s%s", args, out, errOut)
	}
	helm("install", "-n", namespace, "--create-namespace", releaseName, chartDir(), "--set", "proxyServer.entrypointAddress=proxy.example.com")

	var requests testenv.Requests
	cmaWrites := func() int64 { return requests.WritesTo("clustermanagementaddons") }
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = requests.Wrap
	ctx := runManager(t, cfg, controllers.Namespaces{})

	g.Eventually(func(g Gomega) {
		mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: proxyv1alpha1.DefaultConfigurationName}, mpc)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(mpc.Status.Conditions, proxyv1alpha1.ConditionReady)).To(BeTrue(), "%v", mpc.Status.Conditions)
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	cma := func() *addonv1alpha1.ClusterManagementAddOn {
		t.Helper()
		live := &addonv1alpha1.ClusterManagementAddOn{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: proxyv1alpha1.AddonName}, live)).To(Succeed())
		return live
	}

	g.Eventually(testenv.Settled(requests.Writes), time.Minute, time.Second).Should(BeTrue(), "the manager keeps writing")
	live := cma()
	g.Expect(live.Spec.InstallStrategy.Type).To(Equal(addonv1alpha1.AddonInstallStrategyPlacements), "Helm's install strategy stays")
	g.Expect(live.Labels).To(HaveKeyWithValue("app.kubernetes.io/managed-by", "Helm"), "Helm's labels stay")
	g.Expect(metav1.GetControllerOf(live)).NotTo(BeNil(), "the manager took the add-on over: the configuration owns it")

	t.Log("a user labels the add-on: a pass of the configuration and of the add-ons, no write")
	before, cmaBefore := requests.Writes(), cmaWrites()
	live.Labels["team"] = "platform"
	g.Expect(c.Update(ctx, live, client.FieldOwner("kubectl-label"))).To(Succeed())
	g.Consistently(requests.Writes, 3*time.Second, 100*time.Millisecond).Should(Equal(before))

	t.Log("'helm upgrade' to the Manual install strategy: Helm's value holds, the manager writes no add-on")
	helm("upgrade", "-n", namespace, releaseName, chartDir(), "-f", valuesFile("manual"))
	g.Expect(cma().Spec.InstallStrategy.Type).To(Equal(addonv1alpha1.AddonInstallStrategyManual))
	g.Consistently(cmaWrites, 3*time.Second, 100*time.Millisecond).Should(Equal(cmaBefore))
	g.Expect(cma().Spec.InstallStrategy.Type).To(Equal(addonv1alpha1.AddonInstallStrategyManual))
}

// runManager runs the manager's controllers with cfg, writing in scope, until the test ends; the context ends with it.
func runManager(t *testing.T, cfg *rest.Config, scope controllers.Namespaces) context.Context {
	t.Helper()
	g := NewWithT(t)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: scheme.New(), Cache: controllers.CacheOptions(scope),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// More than one test of this process runs the controllers.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	g.Expect(controllers.Setup(ctx, mgr, controllers.Options{Namespaces: scope})).To(Succeed())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with %v", err)
		}
	})
	return ctx
}
