package helm

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/namespaces"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/testenv"
)

// TestTheManagerWorksWithinTheChartsNamespacedRights runs the manager as the chart's ServiceAccount, with the rights
// 'helm install' granted it (a ClusterRole without Secrets, Deployments, Services or RBAC, a Role in the release
// namespace, a Role for Secrets in a certificate namespace): the default configuration gets Ready and a tenant's
// ProxyCertificate is issued, RBAC refusing it nothing; a configuration and a ProxyCertificate in a namespace the
// manager was not given are refused with NamespaceNotManaged, and nothing is written there.
func TestTheManagerWorksWithinTheChartsNamespacedRights(t *testing.T) {
	g := NewWithT(t)
	env, _ := startHub(t)
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	g.Expect(err).NotTo(HaveOccurred())
	ctx := context.Background()
	const tenant, stranger = "team-a", "elsewhere"
	for _, ns := range []string{tenant, stranger} {
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	kcPath, err := testenv.AdminKubeconfig(env, "helm-user", filepath.Join(t.TempDir(), "kubeconfig"))
	g.Expect(err).NotTo(HaveOccurred())
	out, errOut, err := runHelm(t, "install", "-n", namespace, "--create-namespace", releaseName, chartDir(), "--kubeconfig", kcPath,
		"--set", "proxyServer.entrypointAddress=proxy.example.com", "--set", "manager.proxyCertificateNamespaces={"+tenant+"}")
	g.Expect(err).NotTo(HaveOccurred(), "%s%s", out, errOut)

	cs, err := kubernetes.NewForConfig(env.Config)
	g.Expect(err).NotTo(HaveOccurred())
	token, err := kubeclient.ServiceAccountToken(ctx, cs, namespace, "cluster-proxy-addon-manager", time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	asManager := rest.AnonymousClientConfig(env.Config)
	asManager.BearerToken = token
	var requests testenv.Requests
	asManager.WrapTransport = requests.Wrap
	ctx = runManager(t, asManager, controllers.Namespaces{ProxyServers: namespaces.Of(namespace), Certificates: namespaces.Of(tenant)})

	ready := func(o client.Object, conditions func() []metav1.Condition) func(g Gomega) {
		return func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(conditions(), proxyv1alpha1.ConditionReady)).To(BeTrue(), "%v", conditions())
		}
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	g.Eventually(ready(mpc, func() []metav1.Condition { return mpc.Status.Conditions }), time.Minute, 100*time.Millisecond).Should(Succeed())

	certificate := func(ns string) *proxyv1alpha1.ProxyCertificate {
		return &proxyv1alpha1.ProxyCertificate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tool"},
			Spec: proxyv1alpha1.ProxyCertificateSpec{SecretName: "tool", CommonName: "tool",
				IssuerRef: proxyv1alpha1.IssuerReference{Name: proxyv1alpha1.DefaultConfigurationName}}}
	}
	issued := certificate(tenant)
	g.Expect(c.Create(ctx, issued)).To(Succeed())
	g.Eventually(ready(issued, func() []metav1.Condition { return issued.Status.Conditions }), time.Minute, 100*time.Millisecond).Should(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: tenant, Name: "tool"}, &corev1.Secret{})).To(Succeed())

	notManaged := func(conditions func() []metav1.Condition, o client.Object, field string) func(g Gomega) {
		return func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
			ready := meta.FindStatusCondition(conditions(), proxyv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(proxyv1alpha1.ReasonNamespaceNotManaged))
			g.Expect(ready.Message).To(ContainSubstring(field))
			g.Expect(ready.Message).To(ContainSubstring(stranger))
		}
	}
	strayCertificate := certificate(stranger)
	g.Expect(c.Create(ctx, strayCertificate)).To(Succeed())
	g.Eventually(notManaged(func() []metav1.Condition { return strayCertificate.Status.Conditions }, strayCertificate,
		"--proxy-certificate-namespaces"), time.Minute, 100*time.Millisecond).Should(Succeed())

	stray := mpc.DeepCopy()
	stray.ObjectMeta = metav1.ObjectMeta{Name: "stray"}
	stray.Status = proxyv1alpha1.ManagedProxyConfigurationStatus{}
	stray.Spec.ProxyServer.Namespace = stranger
	g.Expect(c.Create(ctx, stray)).To(Succeed())
	g.Eventually(notManaged(func() []metav1.Condition { return stray.Status.Conditions }, stray, "spec.proxyServer.namespace"),
		time.Minute, 100*time.Millisecond).Should(Succeed())

	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: stranger, Name: "tool"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: stranger, Name: "stray"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: stranger, Name: "cluster-proxy-signer"}},
	} {
		err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), fmt.Sprintf("%T %s written where the manager was not given the namespace: %v", o, o.GetName(), err))
	}
	g.Expect(requests.Forbidden()).To(BeEmpty(), "RBAC refused the manager: the chart's rules do not cover what it does")
}
