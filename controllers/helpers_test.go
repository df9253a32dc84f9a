package controllers_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

const (
	timeout  = 30 * time.Second
	interval = 100 * time.Millisecond
)

// newMPC is a valid configuration with its own name and namespace, so specs do not interfere.
func newMPC(mutate ...func(*proxyv1alpha1.ManagedProxyConfiguration)) *proxyv1alpha1.ManagedProxyConfiguration {
	suffix := rand.String(5)
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "mpc-" + suffix},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{
			Authentication: proxyv1alpha1.ManagedProxyConfigurationAuthentication{
				Signer: proxyv1alpha1.ManagedProxyConfigurationCertificateSigner{Type: proxyv1alpha1.SelfSigned},
			},
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{
				Image:     "example.com/cluster-proxy:test",
				Replicas:  2,
				Namespace: "proxy-" + suffix,
				Entrypoint: &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
					Type:     proxyv1alpha1.EntryPointTypeHostname,
					Hostname: &proxyv1alpha1.EntryPointHostname{Value: "proxy." + suffix + ".example.com"},
					Port:     8091,
				},
			},
			ProxyAgent: proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: "example.com/cluster-proxy:test"},
		},
	}
	for _, m := range mutate {
		m(mpc)
	}
	return mpc
}

// createMPC creates mpc and deletes it when the spec ends.
func createMPC(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
	ExpectWithOffset(1, k8s.Create(ctx(), mpc)).To(Succeed())
	DeferCleanupDelete(mpc)
}

func condition(g Gomega, mpc *proxyv1alpha1.ManagedProxyConfiguration, conditionType string) *metav1.Condition {
	live := &proxyv1alpha1.ManagedProxyConfiguration{}
	g.ExpectWithOffset(1, k8s.Get(ctx(), client.ObjectKeyFromObject(mpc), live)).To(Succeed())
	c := meta.FindStatusCondition(live.Status.Conditions, conditionType)
	g.ExpectWithOffset(1, c).NotTo(BeNil(), "condition %s not reported yet", conditionType)
	return c
}

// expectCondition asserts a condition's status and reason, and that its message holds each of messageParts.
func expectCondition(g Gomega, mpc *proxyv1alpha1.ManagedProxyConfiguration, conditionType string, status metav1.ConditionStatus, reason string, messageParts ...string) {
	c := condition(g, mpc, conditionType)
	g.ExpectWithOffset(1, c.Status).To(Equal(status), "%s: %s", conditionType, c.Message)
	g.ExpectWithOffset(1, c.Reason).To(Equal(reason), conditionType)
	for _, part := range messageParts {
		g.ExpectWithOffset(1, c.Message).To(ContainSubstring(part), conditionType)
	}
}

// expectReady waits until the configuration is Ready for its current generation.
func expectReady(mpc *proxyv1alpha1.ManagedProxyConfiguration) {
	EventuallyWithOffset(1, func(g Gomega) {
		live := &proxyv1alpha1.ManagedProxyConfiguration{}
		g.Expect(k8s.Get(ctx(), client.ObjectKeyFromObject(mpc), live)).To(Succeed())
		c := meta.FindStatusCondition(live.Status.Conditions, proxyv1alpha1.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "%s: %s", c.Reason, c.Message)
		g.Expect(live.Status.ObservedGeneration).To(Equal(live.Generation))
	}, timeout, interval).Should(Succeed())
}

func get[T client.Object](g Gomega, obj T, namespace, name string) T {
	g.ExpectWithOffset(1, k8s.Get(ctx(), client.ObjectKey{Namespace: namespace, Name: name}, obj)).To(Succeed())
	return obj
}

func expectGone(obj client.Object) {
	EventuallyWithOffset(1, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx(), client.ObjectKeyFromObject(obj), obj))
	}, timeout, interval).Should(BeTrue(), "%T %s still exists", obj, client.ObjectKeyFromObject(obj))
}

// leafOf parses tls.crt of a secret: the leaf first, then any intermediates.
func leafOf(g Gomega, secret *corev1.Secret) *x509.Certificate {
	chain, err := certs.ParseCertificates(secret.Data["tls.crt"])
	g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return chain[0]
}

func fromYAML(doc string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	ExpectWithOffset(1, yaml.Unmarshal([]byte(doc), &u.Object)).To(Succeed())
	return u
}

// handshake runs a real mutual-TLS handshake on 127.0.0.1 at the fake clock's time: the server presents its
// secret's chain and trusts clientTrust; the client presents its chain and trusts serverTrust.
func handshake(server *corev1.Secret, clientTrust []byte, clientSecret *corev1.Secret, serverTrust []byte) error {
	serverCert, err := tls.X509KeyPair(server.Data["tls.crt"], server.Data["tls.key"])
	if err != nil {
		return err
	}
	clientCert, err := tls.X509KeyPair(clientSecret.Data["tls.crt"], clientSecret.Data["tls.key"])
	if err != nil {
		return err
	}
	pool := func(pemData []byte) *x509.CertPool {
		p := x509.NewCertPool()
		p.AppendCertsFromPEM(pemData)
		return p
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pool(clientTrust),
		ClientAuth: tls.RequireAndVerifyClientCert, Time: fakeClock.Now,
	})
	if err != nil {
		return err
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		serverErr <- conn.(*tls.Conn).Handshake()
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{
		Certificates: []tls.Certificate{clientCert}, RootCAs: pool(serverTrust), ServerName: "localhost", Time: fakeClock.Now,
	})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	defer conn.Close()
	// TLS 1.3 clients finish before the server has checked the client certificate: wait for the server's verdict.
	if err := <-serverErr; err != nil {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}

func ctx() context.Context { return context.Background() }

// DeferCleanupDelete deletes obj when the spec ends. A ManagedProxyConfiguration is deleted in the foreground and
// waited out. It controls the ClusterManagementAddOn, which owns every ManagedClusterAddOn, so the garbage collector
// deletes them all with it: left to run on, that would delete the add-ons the next spec creates meanwhile.
func DeferCleanupDelete(obj client.Object) {
	DeferCleanup(func() {
		if !isConfiguration(obj) {
			_ = client.IgnoreNotFound(k8s.Delete(ctx(), obj))
			return
		}
		Expect(client.IgnoreNotFound(k8s.Delete(ctx(), obj, client.PropagationPolicy(metav1.DeletePropagationForeground)))).To(Succeed())
		expectGone(obj)
	})
}

func isConfiguration(obj client.Object) bool {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.GetKind() == "ManagedProxyConfiguration"
	}
	_, ok := obj.(*proxyv1alpha1.ManagedProxyConfiguration)
	return ok
}

func ptrTo[T any](v T) *T { return &v }

func mpcSuffix() string { return rand.String(5) }

func tlsKeyPair(s *corev1.Secret) (tls.Certificate, error) {
	return tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
}

// must returns v, failing the spec on err.
func must[T any](v T, err error) T {
	GinkgoHelper()
	Expect(err).NotTo(HaveOccurred())
	return v
}
