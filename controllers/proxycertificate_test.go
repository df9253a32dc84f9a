package controllers_test

import (
	"context"
	"crypto/x509"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/managedproxyconfiguration"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/proxycertificate"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// poke makes the controllers look at obj again, as a periodic resync or the renewal timer would after the fake
// clock moved.
func poke(obj client.Object) {
	EventuallyWithOffset(1, func(g Gomega) {
		g.Expect(k8s.Get(ctx(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		ann := obj.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann["test.example.com/poke"] = time.Now().Format(time.RFC3339Nano)
		obj.SetAnnotations(ann)
		g.Expect(k8s.Update(ctx(), obj)).To(Succeed())
	}, timeout, interval).Should(Succeed())
}

func certificateStatus(g Gomega, namespace, name string) *proxyv1alpha1.ProxyCertificate {
	pc := get(g, &proxyv1alpha1.ProxyCertificate{}, namespace, name)
	ready := meta.FindStatusCondition(pc.Status.Conditions, proxyv1alpha1.ConditionReady)
	g.ExpectWithOffset(1, ready).NotTo(BeNil())
	g.ExpectWithOffset(1, ready.Status).To(Equal(metav1.ConditionTrue), ready.Message)
	return pc
}

// eventCount is how often an event with reason was recorded for obj, counting repeats folded into one Event.
func eventCount(obj client.Object, reason string) int {
	events := &corev1.EventList{}
	Expect(k8s.List(ctx(), events, client.InNamespace(obj.GetNamespace()))).To(Succeed())
	n := 0
	for _, e := range events.Items {
		if e.InvolvedObject.UID != obj.GetUID() || e.Reason != reason {
			continue
		}
		switch {
		case e.Series != nil && e.Series.Count > 1:
			n += int(e.Series.Count)
		case e.Count > 1:
			n += int(e.Count)
		default:
			n++
		}
	}
	return n
}

func eventReasons(obj client.Object) []string {
	events := &corev1.EventList{}
	Expect(k8s.List(ctx(), events, client.InNamespace(obj.GetNamespace()))).To(Succeed())
	var reasons []string
	for _, e := range events.Items {
		if e.InvolvedObject.UID == obj.GetUID() {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

var _ = Describe("ProxyCertificate", func() {
	It("renews a certificate at its renewal time, not before", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		pc := &proxyv1alpha1.ProxyCertificate{
			ObjectMeta: metav1.ObjectMeta{Name: "tool", Namespace: ns},
			Spec: proxyv1alpha1.ProxyCertificateSpec{
				SecretName: "tool-cert", CommonName: "tool", Usages: []proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageClientAuth},
				Duration: &metav1.Duration{Duration: 3 * time.Hour}, RenewBefore: &metav1.Duration{Duration: time.Hour},
				IssuerRef: proxyv1alpha1.IssuerReference{Name: mpc.Name},
			},
		}
		Expect(k8s.Create(ctx(), pc)).To(Succeed())
		var first *proxyv1alpha1.ProxyCertificate
		Eventually(func(g Gomega) { first = certificateStatus(g, ns, "tool") }, timeout, interval).Should(Succeed())
		Expect(first.Status.RenewalTime.Time).To(BeTemporally("~", first.Status.NotAfter.Add(-time.Hour), time.Second))
		leaf := leafOf(Default, get(Default, &corev1.Secret{}, ns, "tool-cert"))
		Expect(leaf.Subject.CommonName).To(Equal("tool"))

		By("a pass asks to be called again at the renewal time, which is what renews the certificate")
		r := &proxycertificate.Reconciler{Client: k8s, Clock: fakeClock, Recorder: events.NewFakeRecorder(10)}
		res, err := r.Reconcile(ctx(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pc)})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RequeueAfter).To(BeNumerically("~", first.Status.RenewalTime.Sub(fakeClock.Now()), time.Second))

		By("a minute before the renewal time nothing changes")
		fakeClock.SetTime(first.Status.RenewalTime.Add(-time.Minute))
		poke(pc)
		Consistently(func(g Gomega) {
			g.Expect(certificateStatus(g, ns, "tool").Status.SerialNumber).To(Equal(first.Status.SerialNumber))
		}, 2*time.Second, interval).Should(Succeed())

		By("at the renewal time a new certificate is issued")
		fakeClock.SetTime(first.Status.RenewalTime.Add(time.Second))
		poke(pc)
		Eventually(func(g Gomega) {
			now := certificateStatus(g, ns, "tool")
			g.Expect(now.Status.SerialNumber).NotTo(Equal(first.Status.SerialNumber))
			g.Expect(now.Status.NotAfter.Time).To(BeTemporally(">", first.Status.NotAfter.Time))
			g.Expect(leafOf(g, get(g, &corev1.Secret{}, ns, "tool-cert")).SerialNumber.Text(16)).To(Equal(now.Status.SerialNumber))
		}, timeout, interval).Should(Succeed())
		Eventually(func() int { return eventCount(pc, "Issued") }, timeout, interval).Should(Equal(2), "one Issued event per issuance")
	})

	It("re-issues when a SAN is added to the configuration, and when usages change", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		before := certificateStatus(Default, ns, "agent-server").Status.SerialNumber

		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Spec.Authentication.Signer.SelfSigned = &proxyv1alpha1.AuthenticationSelfSigned{AdditionalSANs: []string{"new-name.example.com", "192.0.2.9"}}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			leaf := leafOf(g, get(g, &corev1.Secret{}, ns, "agent-server"))
			g.Expect(leaf.DNSNames).To(ContainElement("new-name.example.com"))
			g.Expect(leaf.IPAddresses).To(ContainElement(BeEquivalentTo([]byte{192, 0, 2, 9})))
			g.Expect(certificateStatus(g, ns, "agent-server").Status.SerialNumber).NotTo(Equal(before))
		}, timeout, interval).Should(Succeed())
		expectReady(mpc)

		By("changing usages of a certificate re-issues it with the new usages")
		pc := &proxyv1alpha1.ProxyCertificate{
			ObjectMeta: metav1.ObjectMeta{Name: "usage", Namespace: ns},
			Spec: proxyv1alpha1.ProxyCertificateSpec{SecretName: "usage", CommonName: "usage",
				Usages: []proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageClientAuth}, IssuerRef: proxyv1alpha1.IssuerReference{Name: mpc.Name}},
		}
		Expect(k8s.Create(ctx(), pc)).To(Succeed())
		Eventually(func(g Gomega) { certificateStatus(g, ns, "usage") }, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ProxyCertificate{}, ns, "usage")
			live.Spec.Usages = []proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageServerAuth}
			g.Expect(k8s.Update(ctx(), live)).To(Succeed())
		}, timeout, interval).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(leafOf(g, get(g, &corev1.Secret{}, ns, "usage")).ExtKeyUsage).To(Equal([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}))
		}, timeout, interval).Should(Succeed())
	})

	It("rotates the CA with an overlap in which every TLS handshake keeps working", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		expectRolloverWithOverlap(mpc, func() {
			live := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			live.Annotations = map[string]string{proxyv1alpha1.RotateCAAnnotation: "2026-11-20"}
			Expect(k8s.Update(ctx(), live)).To(Succeed())
		})
	})

	It("rolls a replaced Provided CA over with the same overlap, and keeps the last good CA while the secret is broken", func() {
		caNS := "user-ca-" + mpcSuffix()
		Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: caNS}})).To(Succeed())
		first := must(certs.NewCA("my-company-ca", 5*365*24*time.Hour, fakeClock.Now()))
		userSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-ca", Namespace: caNS},
			Data: map[string][]byte{"ca.crt": first.CertPEM, "ca.key": first.KeyPEM}}
		Expect(k8s.Create(ctx(), userSecret)).To(Succeed())
		mpc := newMPC(func(m *proxyv1alpha1.ManagedProxyConfiguration) {
			m.Spec.Authentication.Signer = proxyv1alpha1.ManagedProxyConfigurationCertificateSigner{
				Type:     proxyv1alpha1.Provided,
				Provided: &proxyv1alpha1.AuthenticationProvided{SecretRef: &proxyv1alpha1.SecretReference{Name: "my-ca", Namespace: caNS}},
			}
		})
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		firstCA := certs.Fingerprint(first.Cert)
		Expect(certificateStatus(Default, ns, "proxy-server").Status.IssuerFingerprint).To(Equal(firstCA))

		By("a key that does not match the certificate: SignerReady=False names the secret and the key, and the last good CA keeps signing")
		other := must(certs.NewCA("someone-else", 5*365*24*time.Hour, fakeClock.Now()))
		userSecret.Data = map[string][]byte{"ca.crt": first.CertPEM, "ca.key": other.KeyPEM}
		Expect(k8s.Update(ctx(), userSecret)).To(Succeed())
		poke(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name))
		Eventually(func(g Gomega) {
			expectCondition(g, mpc, proxyv1alpha1.ConditionSignerReady, metav1.ConditionFalse, proxyv1alpha1.ReasonSignerSecretInvalid,
				caNS+"/my-ca", "ca.key does not match ca.crt", "the last good CA "+firstCA+" keeps signing")
		}, timeout, interval).Should(Succeed())
		Expect(eventReasons(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name))).To(ContainElement(proxyv1alpha1.ReasonSignerSecretInvalid))
		issuedMeanwhile := &proxyv1alpha1.ProxyCertificate{
			ObjectMeta: metav1.ObjectMeta{Name: "while-broken", Namespace: ns},
			Spec: proxyv1alpha1.ProxyCertificateSpec{SecretName: "while-broken", CommonName: "while-broken",
				Usages: []proxyv1alpha1.KeyUsage{proxyv1alpha1.UsageClientAuth}, IssuerRef: proxyv1alpha1.IssuerReference{Name: mpc.Name}},
		}
		Expect(k8s.Create(ctx(), issuedMeanwhile)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(certificateStatus(g, ns, "while-broken").Status.IssuerFingerprint).To(Equal(firstCA))
		}, timeout, interval).Should(Succeed(), "a new certificate is issued by the last good CA")
		Expect(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Signer.BundleFingerprints).To(Equal([]string{firstCA}))

		By("a new CA in the secret: the same rollover with an overlap as a self-signed rotation")
		expectRolloverWithOverlap(mpc, func() {
			second := must(certs.NewCA("my-company-ca-2", 5*365*24*time.Hour, fakeClock.Now()))
			userSecret.Data = map[string][]byte{"ca.crt": second.CertPEM, "ca.key": second.KeyPEM}
			Expect(k8s.Update(ctx(), userSecret)).To(Succeed())
			poke(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name))
		})
		expectCondition(Default, mpc, proxyv1alpha1.ConditionSignerReady, metav1.ConditionTrue, proxyv1alpha1.ReasonSignerReady)
	})

	It("rotates a self-signed CA when two thirds of its life have passed", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		oldCA := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Signer.CAFingerprint
		fakeClock.Step(7 * 365 * 24 * time.Hour)
		poke(mpc)
		Eventually(func(g Gomega) {
			status := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Signer
			g.Expect(status.CAFingerprint).NotTo(Equal(oldCA))
			g.Expect(status.CANotAfter.Time).To(BeTemporally(">", fakeClock.Now().Add(9*365*24*time.Hour)))
			for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert"} {
				g.Expect(certificateStatus(g, ns, name).Status.IssuerFingerprint).To(Equal(status.CAFingerprint), name)
			}
		}, timeout, interval).Should(Succeed())
		expectReady(mpc)
	})
})

var _ = Describe("ProxyCertificate failures", func() {
	It("reports an issuer that does not exist, then issues once it does", func() {
		mpc := newMPC()
		ns := mpc.Spec.ProxyServer.Namespace
		Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		pc := &proxyv1alpha1.ProxyCertificate{
			ObjectMeta: metav1.ObjectMeta{Name: "early", Namespace: ns},
			Spec:       proxyv1alpha1.ProxyCertificateSpec{SecretName: "early", CommonName: "early", IssuerRef: proxyv1alpha1.IssuerReference{Name: mpc.Name}},
		}
		Expect(k8s.Create(ctx(), pc)).To(Succeed())
		Eventually(func(g Gomega) {
			ready := meta.FindStatusCondition(get(g, &proxyv1alpha1.ProxyCertificate{}, ns, "early").Status.Conditions, proxyv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(proxyv1alpha1.ReasonIssuerNotFound))
			g.Expect(ready.Message).To(ContainSubstring("ManagedProxyConfiguration " + mpc.Name + " not found"))
		}, timeout, interval).Should(Succeed())

		createMPC(mpc)
		Eventually(func(g Gomega) { certificateStatus(g, ns, "early") }, timeout, interval).Should(Succeed())
	})

	It("issues the impersonator only to the configuration's own certificate, and refuses reserved names to others", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		own := certificateStatus(Default, ns, proxyv1alpha1.ImpersonatorSecretName)
		Expect(own.Spec.CommonName).To(Equal(contract.ImpersonatorCommonName))
		Expect(own.Spec.Usages).To(ConsistOf(proxyv1alpha1.UsageClientAuth))

		for name, cn := range map[string]string{
			"forged-impersonator": contract.ImpersonatorCommonName,
			"forged-agent":        contract.AgentCommonNamePrefix + "cluster1",
		} {
			Expect(k8s.Create(ctx(), &proxyv1alpha1.ProxyCertificate{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: proxyv1alpha1.ProxyCertificateSpec{SecretName: name, CommonName: cn,
					IssuerRef: proxyv1alpha1.IssuerReference{Name: mpc.Name}},
			})).To(Succeed())
		}
		for _, name := range []string{"forged-impersonator", "forged-agent"} {
			Eventually(func(g Gomega) {
				ready := meta.FindStatusCondition(get(g, &proxyv1alpha1.ProxyCertificate{}, ns, name).Status.Conditions, proxyv1alpha1.ConditionReady)
				g.Expect(ready).NotTo(BeNil())
				g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(ready.Reason).To(Equal(proxyv1alpha1.ReasonReservedCommonName))
				g.Expect(ready.Message).To(ContainSubstring("spec.commonName"))
			}, timeout, interval).Should(Succeed(), name)
			Expect(apierrors.IsNotFound(k8s.Get(ctx(), client.ObjectKey{Namespace: ns, Name: name}, &corev1.Secret{}))).To(BeTrue(),
				"no secret may be issued for %s", name)
		}
	})

	It("stays Issuing with the reason, and Ready=False, while the secret cannot be written", func() {
		mpc := newMPC()
		createMPC(mpc)
		expectReady(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		policy := fromYAML(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: deny-blocked-secret}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [secrets]}
  validations:
  - expression: "object.metadata.name != 'blocked'"
    message: "secret blocked is write-protected"
`)
		binding := fromYAML(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: deny-blocked-secret}
spec: {policyName: deny-blocked-secret, validationActions: [Deny]}
`)
		Expect(k8s.Create(ctx(), policy)).To(Succeed())
		Expect(k8s.Create(ctx(), binding)).To(Succeed())
		DeferCleanupDelete(policy)
		DeferCleanupDelete(binding)
		probe := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "blocked", Namespace: ns}}
		Eventually(func() error { return k8s.Create(ctx(), probe.DeepCopy(), client.DryRunAll) }, timeout, interval).
			Should(MatchError(ContainSubstring("write-protected")))

		pc := &proxyv1alpha1.ProxyCertificate{
			ObjectMeta: metav1.ObjectMeta{Name: "blocked", Namespace: ns},
			Spec:       proxyv1alpha1.ProxyCertificateSpec{SecretName: "blocked", CommonName: "blocked", IssuerRef: proxyv1alpha1.IssuerReference{Name: mpc.Name}},
		}
		Expect(k8s.Create(ctx(), pc)).To(Succeed())
		Eventually(func(g Gomega) {
			live := get(g, &proxyv1alpha1.ProxyCertificate{}, ns, "blocked")
			issuing := meta.FindStatusCondition(live.Status.Conditions, proxyv1alpha1.ConditionIssuing)
			g.Expect(issuing).NotTo(BeNil())
			g.Expect(issuing.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(issuing.Reason).To(Equal(string(certs.ReasonMissing)))
			ready := meta.FindStatusCondition(live.Status.Conditions, proxyv1alpha1.ConditionReady)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(proxyv1alpha1.ReasonIssueFailed))
			g.Expect(ready.Message).To(ContainSubstring("write-protected"))
		}, timeout, interval).Should(Succeed())

		Expect(k8s.Delete(ctx(), binding)).To(Succeed())
		Eventually(func(g Gomega) {
			live := certificateStatus(g, ns, "blocked")
			g.Expect(meta.IsStatusConditionFalse(live.Status.Conditions, proxyv1alpha1.ConditionIssuing)).To(BeTrue())
		}, 2*timeout, interval).Should(Succeed())
	})
})

// expectRolloverWithOverlap runs rotate, which replaces the CA of mpc (Ready), and checks the rollover: every
// certificate is re-issued under the new CA while the old one stays in the bundle, the old one leaves it only after
// the grace period, and a real TLS handshake works across every pair of states two peers can be in meanwhile.
func expectRolloverWithOverlap(mpc *proxyv1alpha1.ManagedProxyConfiguration, rotate func()) {
	GinkgoHelper()
	ns := mpc.Spec.ProxyServer.Namespace
	oldBundle := get(Default, &corev1.Secret{}, ns, "proxy-server-ca").Data["ca.crt"]
	oldServer := get(Default, &corev1.Secret{}, ns, "proxy-server")
	oldClient := get(Default, &corev1.Secret{}, ns, "proxy-client")
	oldCA := certificateStatus(Default, ns, "proxy-server").Status.IssuerFingerprint
	Expect(handshake(oldServer, oldBundle, oldClient, oldBundle)).To(Succeed())

	By("recording every bundle the operator publishes during the rotation")
	watchCtx, stop := context.WithCancel(ctx())
	defer stop()
	w, err := k8sWatch.Watch(watchCtx, &corev1.SecretList{}, client.InNamespace(ns))
	Expect(err).NotTo(HaveOccurred())
	bundles := make(chan []byte, 100)
	go func() {
		defer GinkgoRecover()
		for ev := range w.ResultChan() {
			if s, ok := ev.Object.(*corev1.Secret); ok && ev.Type != watch.Deleted && s.Name == "proxy-server-ca" {
				bundles <- s.Data["ca.crt"]
			}
		}
	}()

	rotate()

	By("every certificate is re-issued under the new CA; the old CA stays trusted for the grace period")
	var newCA string
	Eventually(func(g Gomega) {
		mpcNow := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
		g.Expect(mpcNow.Status.Signer).NotTo(BeNil())
		newCA = mpcNow.Status.Signer.CAFingerprint
		g.Expect(newCA).NotTo(Equal(oldCA))
		for _, name := range []string{"proxy-server", "agent-server", "proxy-client", "cluster-proxy-user-serving-cert"} {
			g.Expect(certificateStatus(g, ns, name).Status.IssuerFingerprint).To(Equal(newCA), name)
		}
		g.Expect(get(g, &corev1.Secret{}, ns, "cluster-proxy-signer").Annotations).To(HaveKey("proxy.open-cluster-management.io/previous-ca-unused-since"))
	}, timeout, interval).Should(Succeed())
	Consistently(func(g Gomega) {
		g.Expect(get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Signer.BundleFingerprints).To(ConsistOf(newCA, oldCA))
	}, 2*time.Second, interval).Should(Succeed(), "the pods may still serve old-CA certificates until their volumes update")

	By("after the grace period, the old CA leaves the bundle")
	fakeClock.Step(managedproxyconfiguration.CARolloverGrace)
	poke(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name))
	Eventually(func(g Gomega) {
		mpcNow := get(g, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
		g.Expect(mpcNow.Status.Signer.BundleFingerprints).To(Equal([]string{newCA}))
		signer := get(g, &corev1.Secret{}, ns, "cluster-proxy-signer")
		g.Expect(signer.Data).NotTo(HaveKey("previous-ca.crt"))
	}, timeout, interval).Should(Succeed())
	expectReady(mpc)
	newBundle := get(Default, &corev1.Secret{}, ns, "proxy-server-ca").Data["ca.crt"]
	newServer := get(Default, &corev1.Secret{}, ns, "proxy-server")
	newClient := get(Default, &corev1.Secret{}, ns, "proxy-client")
	stop()

	var overlap []byte
collect:
	for {
		select {
		case b := <-bundles:
			if parsed, err := certs.ParseCertificates(b); err == nil && len(parsed) == 2 {
				overlap = b
			}
		default:
			break collect
		}
	}
	Expect(overlap).NotTo(BeNil(), "the bundle held the old and the new CA for a while")
	Expect(eventReasons(mpc)).To(ContainElements("CARotated", "CARolloverComplete"))

	By("real handshakes across every pair of states a peer can be in during the rollover")
	Expect(handshake(newServer, oldBundle, oldClient, oldBundle)).To(Succeed(), "a client with the old bundle trusts a new server leaf")
	Expect(handshake(oldServer, oldBundle, newClient, oldBundle)).To(Succeed(), "a server with the old bundle trusts a new client leaf")
	Expect(handshake(oldServer, overlap, oldClient, overlap)).To(Succeed(), "overlap bundle, old leaves")
	Expect(handshake(newServer, overlap, oldClient, overlap)).To(Succeed(), "overlap bundle, new server leaf")
	Expect(handshake(oldServer, overlap, newClient, overlap)).To(Succeed(), "overlap bundle, new client leaf")
	Expect(handshake(newServer, newBundle, newClient, newBundle)).To(Succeed(), "new bundle, new leaves")
	Expect(handshake(oldServer, newBundle, oldClient, newBundle)).NotTo(Succeed(), "control: the old CA is no longer trusted")
}
