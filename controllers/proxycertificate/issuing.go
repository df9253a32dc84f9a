package proxycertificate

import (
	"bytes"
	"context"
	"crypto/x509"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
)

// issue signs a new certificate and writes it with the intermediates and the trust bundle.
func (r *Reconciler) issue(ctx context.Context, pc *proxyv1alpha1.ProxyCertificate, spec certs.LeafSpec, sgn *signer.Signer, reason certs.IssueReason, now time.Time) (*x509.Certificate, error) {
	leaf, err := certs.IssueLeaf(sgn.CA, spec, now)
	if err != nil {
		return nil, err
	}
	chain := append(append([]byte{}, leaf.CertPEM...), sgn.Intermediates...)
	if _, err := apply.Ensure(ctx, r.Client, tlsSecret(pc, chain, leaf.KeyPEM, sgn.Bundle)); err != nil {
		return nil, err
	}
	r.Recorder.Eventf(pc, nil, corev1.EventTypeNormal, "Issued", "Issue", "Issued certificate serial %s into secret %s (%s), valid until %s",
		leaf.Cert.SerialNumber.Text(16), pc.Spec.SecretName, reason, leaf.Cert.NotAfter.UTC().Format(time.RFC3339))
	return leaf.Cert, nil
}

// ensureBundle keeps ca.crt of an up-to-date certificate's secret equal to the published bundle.
func (r *Reconciler) ensureBundle(ctx context.Context, pc *proxyv1alpha1.ProxyCertificate, secret *corev1.Secret, sgn *signer.Signer) error {
	if bytes.Equal(secret.Data[corev1.ServiceAccountRootCAKey], sgn.Bundle) {
		return nil
	}
	_, err := apply.Ensure(ctx, r.Client, tlsSecret(pc, secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey], sgn.Bundle))
	return err
}

func tlsSecret(pc *proxyv1alpha1.ProxyCertificate, crt, key, bundle []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      pc.Spec.SecretName,
			Namespace: pc.Namespace,
			Labels:    map[string]string{render.ManagedByLabel: render.ManagedByValue},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         proxyv1alpha1.GroupVersion.String(),
				Kind:               "ProxyCertificate",
				Name:               pc.Name,
				UID:                pc.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key, corev1.ServiceAccountRootCAKey: bundle},
	}
}
