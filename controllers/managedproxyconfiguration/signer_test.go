package managedproxyconfiguration

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
)

func TestThePreviousCAStaysForTheRolloverGraceAfterItsLastUse(t *testing.T) {
	now := time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC)
	unusedSince := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		previousCAUnusedAnnotation: now.Add(-10 * time.Second).Format(time.RFC3339)}}}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	for _, c := range []struct {
		name  string
		grace time.Duration
		left  time.Duration
	}{
		{"the default, without a grace set", 0, CARolloverGrace - 10*time.Second},
		{"the grace set (--ca-rollover-grace)", 45 * time.Second, 35 * time.Second},
		{"a grace already over", 5 * time.Second, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &Reconciler{Clock: clocktesting.NewFakePassiveClock(now), RolloverGrace: c.grace}
			left, err := r.previousCAGrace(context.Background(), mpc, unusedSince)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(left).To(Equal(c.left))
		})
	}
}

// The cache may not hold the signer secret the operator wrote a moment ago; read from the API server, it is the
// operator's own (its label), so it signs as it is: no adoption, no Event, no write.
func TestTheOperatorsOwnSignerSecretIsNotAdoptedWhileTheCacheLags(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC)
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	ca, err := certs.NewCA(CACommonName, CAValidity, now)
	g.Expect(err).NotTo(HaveOccurred())
	own := render.SignerSecret(mpc, signer.SecretKey(mpc).Name, map[string][]byte{signer.KeyCACert: ca.CertPEM, signer.KeyCAKey: ca.KeyPEM}, nil)
	api := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(own).Build()
	// No Recorder and no Client: an adoption would emit an Event and write the secret, and panic here.
	r := &Reconciler{APIReader: api, Clock: clocktesting.NewFakePassiveClock(now)}
	got, secret, err := r.adoptCA(context.Background(), mpc, "")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(certs.Fingerprint(got.Cert)).To(Equal(certs.Fingerprint(ca.Cert)))
	g.Expect(secret.Annotations).NotTo(HaveKey(caSourceAnnotation))
}

// A hub upgraded from an operator that made the configuration own the signer secret: the next pass removes that
// owner reference (of the configuration, or of an earlier one of the same name) and keeps others; without one it
// writes nothing.
func TestTheSignerSecretLosesTheConfigurationsOwnerReference(t *testing.T) {
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName, UID: "now"}}
	ownerOf := func(apiVersion, kind, uid string) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: mpc.Name, UID: types.UID(uid)}
	}
	users := ownerOf("example.com/v1", "Keeper", "keeper")
	for _, c := range []struct {
		name   string
		owners []metav1.OwnerReference
		want   []metav1.OwnerReference
	}{
		{"owned by the configuration", []metav1.OwnerReference{ownerOf(proxyv1alpha1.GroupVersion.String(), "ManagedProxyConfiguration", "now")}, nil},
		{"owned by an earlier configuration", []metav1.OwnerReference{ownerOf("proxy.open-cluster-management.io/v1beta1", "ManagedProxyConfiguration", "before")}, nil},
		{"owned by the configuration and by a user's object", []metav1.OwnerReference{
			ownerOf(proxyv1alpha1.GroupVersion.String(), "ManagedProxyConfiguration", "now"), users}, []metav1.OwnerReference{users}},
		{"owned by a user's object alone", []metav1.OwnerReference{users}, []metav1.OwnerReference{users}},
		{"not owned", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			secret := render.SignerSecret(mpc, signer.SecretKey(mpc).Name, map[string][]byte{signer.KeyCACert: []byte("ca")}, nil)
			secret.OwnerReferences = c.owners
			api := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(secret).Build()
			before := &corev1.Secret{}
			g.Expect(api.Get(context.Background(), signer.SecretKey(mpc), before)).To(Succeed())
			r := &Reconciler{Client: api}
			g.Expect(r.disownSignerSecret(context.Background(), mpc)).To(Succeed())
			after := &corev1.Secret{}
			g.Expect(api.Get(context.Background(), signer.SecretKey(mpc), after)).To(Succeed())
			g.Expect(after.OwnerReferences).To(Equal(c.want))
			g.Expect(after.Data).To(Equal(before.Data))
			if len(c.owners) == len(c.want) {
				g.Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "nothing to remove: no write")
			}
		})
	}
}
