// Package signer reads the CA of a ManagedProxyConfiguration and its published trust bundle. The
// ManagedProxyConfiguration reconciler writes them; the ProxyCertificate reconciler issues with them.
package signer

import (
	"bytes"
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

// Keys of the signer secret.
const (
	KeyCACert = "ca.crt"
	KeyCAKey  = "ca.key"
	// KeyPreviousCA holds the CA replaced by the last rotation, until no certificate issued by it remains.
	KeyPreviousCA = "previous-ca.crt"
	// KeyCrossSignedCA holds the current CA cross-signed by the previous one; it is served after leaves so that
	// peers still trusting only the previous CA accept them.
	KeyCrossSignedCA = "cross-signed-ca.crt"
)

// Signer is what issuing needs: the current CA, the intermediates to serve after its leaves, and the bundle.
type Signer struct {
	CA            *certs.KeyPair
	Intermediates []byte
	Bundle        []byte
}

// NotReadyError means the signer cannot issue yet for a reason a person or the operator must resolve; it is
// reported in conditions and not retried hot.
type NotReadyError struct {
	Reason  string
	Message string
}

func (e *NotReadyError) Error() string { return e.Message }

// SecretKey is the secret that holds the CA the operator signs with for mpc: one it generated (SelfSigned), or a
// copy of the last good CA of a Provided secret, kept so that a Provided secret replaced or broken never stops
// signing and a replaced one rolls over with an overlap.
func SecretKey(mpc *proxyv1alpha1.ManagedProxyConfiguration) types.NamespacedName {
	return types.NamespacedName{Namespace: contract.Namespace(mpc), Name: proxyv1alpha1.SignerSecretName}
}

// ProvidedSecretKey is the user's CA secret of a Provided signer, and whether mpc has one.
func ProvidedSecretKey(mpc *proxyv1alpha1.ManagedProxyConfiguration) (types.NamespacedName, bool) {
	signer := mpc.Spec.Authentication.Signer
	if signer.Type != proxyv1alpha1.Provided || signer.Provided == nil || signer.Provided.SecretRef == nil {
		return types.NamespacedName{}, false
	}
	ref := signer.Provided.SecretRef
	ns := ref.Namespace
	if ns == "" {
		ns = contract.Namespace(mpc)
	}
	return types.NamespacedName{Namespace: ns, Name: ref.Name}, true
}

// ReadCA reads and parses the CA the operator signs with for mpc (SecretKey). Missing or unusable, it is a
// NotReadyError: the ManagedProxyConfiguration reconciler has not written it yet.
func ReadCA(ctx context.Context, reader client.Reader, mpc *proxyv1alpha1.ManagedProxyConfiguration) (*corev1.Secret, *certs.KeyPair, error) {
	key := SecretKey(mpc)
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &NotReadyError{Reason: proxyv1alpha1.ReasonIssuerNotReady, Message: fmt.Sprintf("CA secret %s is not written yet", key)}
		}
		return nil, nil, fmt.Errorf("get CA secret %s: %w", key, err)
	}
	ca, err := certs.ParseCA(secret.Data[KeyCACert], secret.Data[KeyCAKey])
	if err != nil {
		return secret, nil, &NotReadyError{Reason: proxyv1alpha1.ReasonIssuerNotReady, Message: fmt.Sprintf("CA secret %s is not a usable CA: %v", key, err)}
	}
	return secret, ca, nil
}

// ReadProvided reads and parses the user's CA secret of a Provided signer with reader (uncached: the secret does not
// carry the operator's label, so the cache does not hold it). What a user must fix is a NotReadyError whose message
// names the secret and, when it is malformed, its key.
func ReadProvided(ctx context.Context, reader client.Reader, mpc *proxyv1alpha1.ManagedProxyConfiguration) (*certs.KeyPair, error) {
	key, ok := ProvidedSecretKey(mpc)
	if !ok {
		return nil, &NotReadyError{Reason: proxyv1alpha1.ReasonSignerSecretMissing, Message: "signer.provided.secretRef is not set"}
	}
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &NotReadyError{
				Reason:  proxyv1alpha1.ReasonSignerSecretMissing,
				Message: fmt.Sprintf("signer secret %s not found: create it with ca.crt and ca.key, or set signer.type: SelfSigned", key),
			}
		}
		return nil, fmt.Errorf("get signer secret %s: %w", key, err)
	}
	ca, err := certs.ParseCA(secret.Data[KeyCACert], secret.Data[KeyCAKey])
	if err != nil {
		return nil, &NotReadyError{
			Reason:  proxyv1alpha1.ReasonSignerSecretInvalid,
			Message: fmt.Sprintf("signer secret %s is not a usable CA: %v", key, err),
		}
	}
	return ca, nil
}

// Load returns the signer of mpc, ready to issue: the CA is readable and the published bundle already trusts it,
// so no certificate is issued under a CA its peers have not been given yet.
func Load(ctx context.Context, cached client.Reader, mpc *proxyv1alpha1.ManagedProxyConfiguration) (*Signer, error) {
	secret, ca, err := ReadCA(ctx, cached, mpc)
	if err != nil {
		return nil, err
	}
	bundleKey := types.NamespacedName{Namespace: contract.Namespace(mpc), Name: proxyv1alpha1.CABundleSecretName}
	bundleSecret := &corev1.Secret{}
	if err := cached.Get(ctx, bundleKey, bundleSecret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &NotReadyError{Reason: proxyv1alpha1.ReasonIssuerNotReady, Message: fmt.Sprintf("CA bundle %s is not published yet", bundleKey)}
		}
		return nil, fmt.Errorf("get CA bundle %s: %w", bundleKey, err)
	}
	bundle := bundleSecret.Data["ca.crt"]
	if !bytes.Contains(bundle, ca.CertPEM) {
		return nil, &NotReadyError{Reason: proxyv1alpha1.ReasonIssuerNotReady, Message: fmt.Sprintf("CA bundle %s does not include the current CA yet", bundleKey)}
	}
	return &Signer{CA: ca, Intermediates: secret.Data[KeyCrossSignedCA], Bundle: bundle}, nil
}
