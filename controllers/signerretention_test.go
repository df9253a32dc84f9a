package controllers_test

import (
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
)

var _ = Describe("The signer CA", func() {
	DescribeTable("survives its configuration deleted and created again, as helm uninstall and install do",
		func(signerType proxyv1alpha1.AuthenticationSignerType, firstEvent string) {
			suffix := mpcSuffix()
			mpc := newMPC()
			if signerType == proxyv1alpha1.Provided {
				caNS := "user-ca-" + suffix
				Expect(k8s.Create(ctx(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: caNS}})).To(Succeed())
				userCA := must(certs.NewCA("my-company-ca", 5*365*24*time.Hour, fakeClock.Now()))
				Expect(k8s.Create(ctx(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "my-ca", Namespace: caNS},
					Data: map[string][]byte{"ca.crt": userCA.CertPEM, "ca.key": userCA.KeyPEM}})).To(Succeed())
				mpc.Spec.Authentication.Signer = proxyv1alpha1.ManagedProxyConfigurationCertificateSigner{
					Type:     proxyv1alpha1.Provided,
					Provided: &proxyv1alpha1.AuthenticationProvided{SecretRef: &proxyv1alpha1.SecretReference{Name: "my-ca", Namespace: caNS}},
				}
			}
			spec := *mpc.Spec.DeepCopy()
			createMPC(mpc)
			ns := mpc.Spec.ProxyServer.Namespace
			expectReady(mpc)

			By("the signer secret has no owner; the bundle and the certificates have")
			first := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
			fingerprint := first.Status.Signer.CAFingerprint
			Expect(fingerprint).NotTo(BeEmpty())
			signerSecret := get(Default, &corev1.Secret{}, ns, proxyv1alpha1.SignerSecretName)
			Expect(signerSecret.OwnerReferences).To(BeEmpty(), "the garbage collector would delete the CA with the configuration")
			Expect(signerSecret.Labels).To(HaveKeyWithValue(render.ManagedByLabel, render.ManagedByValue), "the manager's cache holds it")
			keyPEM := string(signerSecret.Data["ca.key"])
			managerLog.watch(strings.Split(keyPEM, "\n")[1], base64.StdEncoding.EncodeToString([]byte(keyPEM))[60:120])
			Eventually(func() []string { return eventReasons(first) }, timeout, interval).Should(ContainElement(firstEvent),
				"the first configuration's Events are seen (so their absence below means something)")
			doomed := ownedBy(Default, ns, first.UID)
			Expect(names(doomed)).To(ContainElements("Secret/proxy-server-ca", "Secret/proxy-client", "ProxyCertificate/proxy-client"))
			Expect(names(doomed)).NotTo(ContainElement("Secret/" + proxyv1alpha1.SignerSecretName))
			oldClient := get(Default, &corev1.Secret{}, ns, "proxy-client")

			By("deleting the configuration deletes what it owned, and keeps the signer secret")
			Expect(k8s.Delete(ctx(), first, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
			expectGone(first)
			Eventually(func(g Gomega) {
				g.Expect(names(stillThere(g, doomed))).To(BeEmpty(), "the garbage collector has not deleted them yet")
			}, timeout, interval).Should(Succeed())
			kept := get(Default, &corev1.Secret{}, ns, proxyv1alpha1.SignerSecretName)
			Expect(kept.UID).To(Equal(signerSecret.UID))

			By("created again, the configuration signs with the same CA, untouched")
			again := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: mpc.Name}, Spec: spec}
			createMPC(again)
			expectReady(again)
			Expect(again.UID).NotTo(Equal(first.UID))
			Expect(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Signer.CAFingerprint).To(Equal(fingerprint))
			now := get(Default, &corev1.Secret{}, ns, proxyv1alpha1.SignerSecretName)
			Expect(now.UID).To(Equal(signerSecret.UID))
			Expect(now.ResourceVersion).To(Equal(kept.ResourceVersion), "used as it is: not written")
			Expect(now.Data).To(Equal(signerSecret.Data))

			By("the bundle is published again with that CA; the old and the re-issued proxy-client chain to it")
			bundle := get(Default, &corev1.Secret{}, ns, "proxy-server-ca").Data["ca.crt"]
			bundleCerts := must(certs.ParseCertificates(bundle))
			Expect(bundleCerts).To(HaveLen(1))
			Expect(certs.Fingerprint(bundleCerts[0])).To(Equal(fingerprint))
			roots := x509.NewCertPool()
			roots.AddCert(bundleCerts[0])
			verify := x509.VerifyOptions{Roots: roots, CurrentTime: fakeClock.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
			_, err := leafOf(Default, oldClient).Verify(verify)
			Expect(err).NotTo(HaveOccurred(), "a hub client holding the proxy-client from before keeps working")
			Eventually(func(g Gomega) {
				newClient := get(g, &corev1.Secret{}, ns, "proxy-client")
				g.Expect(newClient.UID).NotTo(Equal(oldClient.UID), "not re-issued yet")
				_, err := leafOf(g, newClient).Verify(verify)
				g.Expect(err).NotTo(HaveOccurred())
			}, timeout, interval).Should(Succeed())

			By("no new CA: no Event says one was made or taken in")
			Consistently(func() []string { return eventReasons(again) }, 2*time.Second, 250*time.Millisecond).
				ShouldNot(ContainElement(Or(Equal("CAGenerated"), Equal("CAProvided"), Equal("CAAdopted"), Equal("CARotated"))))
			Expect(managerLog.lines()).To(BeEmpty(), "the manager logs no key material")
		},
		Entry("SelfSigned", proxyv1alpha1.SelfSigned, "CAGenerated"),
		Entry("Provided: the copy of the user's CA", proxyv1alpha1.Provided, "CAProvided"),
	)

	It("loses the configuration's owner reference it carries from an earlier operator version", func() {
		mpc := newMPC()
		createMPC(mpc)
		ns := mpc.Spec.ProxyServer.Namespace
		expectReady(mpc)
		live := get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name)
		fingerprint := live.Status.Signer.CAFingerprint
		signerSecret := get(Default, &corev1.Secret{}, ns, proxyv1alpha1.SignerSecretName)

		By("the signer secret as an earlier version applied it: controlled by the configuration")
		annotations := map[string]string{}
		for k, v := range signerSecret.Annotations {
			if k != apply.HashAnnotation {
				annotations[k] = v
			}
		}
		if len(annotations) == 0 {
			annotations = nil
		}
		before := render.SignerSecret(live, proxyv1alpha1.SignerSecretName, signerSecret.Data, annotations)
		before.OwnerReferences = []metav1.OwnerReference{{APIVersion: proxyv1alpha1.GroupVersion.String(), Kind: "ManagedProxyConfiguration",
			Name: live.Name, UID: live.UID, Controller: ptrTo(true), BlockOwnerDeletion: ptrTo(true)}}
		Expect(apply.Ensure(ctx(), k8s, before)).To(BeTrue(), "applied with the operator's field manager")

		By("the next pass removes it and keeps the CA")
		Eventually(func(g Gomega) {
			g.Expect(get(g, &corev1.Secret{}, ns, proxyv1alpha1.SignerSecretName).OwnerReferences).To(BeEmpty())
		}, timeout, interval).Should(Succeed())
		expectQuiet()
		after := get(Default, &corev1.Secret{}, ns, proxyv1alpha1.SignerSecretName)
		Expect(after.UID).To(Equal(signerSecret.UID))
		Expect(after.Data).To(Equal(signerSecret.Data))
		Expect(after.Labels).To(HaveKeyWithValue(render.ManagedByLabel, render.ManagedByValue))
		Expect(get(Default, &proxyv1alpha1.ManagedProxyConfiguration{}, "", mpc.Name).Status.Signer.CAFingerprint).To(Equal(fingerprint))
		writes := requests.WritesTo("secrets")
		Consistently(func() int64 { return requests.WritesTo("secrets") }, 2*time.Second, 250*time.Millisecond).Should(Equal(writes),
			"steady state writes nothing")
	})
})

// ownedBy are the objects of namespace ns that the garbage collector deletes with the owner whose UID is root: those
// whose owner references lead to it, directly or through another of them.
func ownedBy(g Gomega, ns string, root types.UID) []client.Object {
	var all []client.Object
	for _, list := range []client.ObjectList{&corev1.SecretList{}, &corev1.ConfigMapList{}, &corev1.ServiceList{},
		&corev1.ServiceAccountList{}, &appsv1.DeploymentList{}, &rbacv1.RoleList{}, &rbacv1.RoleBindingList{},
		&networkingv1.NetworkPolicyList{}, &proxyv1alpha1.ProxyCertificateList{}} {
		g.ExpectWithOffset(1, k8s.List(ctx(), list, client.InNamespace(ns))).To(Succeed())
		items, err := meta.ExtractList(list)
		g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
		for _, item := range items {
			all = append(all, item.(client.Object))
		}
	}
	doomed := map[types.UID]bool{root: true}
	for grew := true; grew; {
		grew = false
		for _, o := range all {
			if doomed[o.GetUID()] {
				continue
			}
			for _, ref := range o.GetOwnerReferences() {
				if doomed[ref.UID] {
					doomed[o.GetUID()], grew = true, true
					break
				}
			}
		}
	}
	var owned []client.Object
	for _, o := range all {
		if doomed[o.GetUID()] {
			owned = append(owned, o)
		}
	}
	return owned
}

// stillThere are those of objs that exist: the same object (by UID), not one of the same name made since.
func stillThere(g Gomega, objs []client.Object) []client.Object {
	var there []client.Object
	for _, o := range objs {
		live := o.DeepCopyObject().(client.Object)
		err := k8s.Get(ctx(), client.ObjectKeyFromObject(o), live)
		if apierrors.IsNotFound(err) {
			continue
		}
		g.ExpectWithOffset(1, err).NotTo(HaveOccurred())
		if live.GetUID() == o.GetUID() {
			there = append(there, o)
		}
	}
	return there
}

// names are "Kind/name" of objs.
func names(objs []client.Object) []string {
	var out []string
	for _, o := range objs {
		t := fmt.Sprintf("%T", o)
		out = append(out, t[strings.LastIndex(t, ".")+1:]+"/"+o.GetName())
	}
	return out
}
