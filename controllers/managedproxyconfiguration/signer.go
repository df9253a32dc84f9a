package managedproxyconfiguration

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/signer"
)

const (
	// CACommonName is the common name of the self-signed CA.
	CACommonName = "open-cluster-management:cluster-proxy"
	// CAValidity is the lifetime of a self-signed CA; it is rotated when 2/3 of it has passed.
	CAValidity = 10 * 365 * 24 * time.Hour
	// rotationHandledAnnotation on the signer secret records the last RotateCAAnnotation value acted on.
	rotationHandledAnnotation = "proxy.open-cluster-management.io/rotate-ca-handled"
	// previousCAUnusedAnnotation on the signer secret records when the previous CA stopped signing any live
	// certificate: it leaves the bundle CARolloverGrace later.
	previousCAUnusedAnnotation = "proxy.open-cluster-management.io/previous-ca-unused-since"
	// caSourceAnnotation on the signer secret is caSourceProvided when its CA is a copy of a Provided secret's; a
	// return to SelfSigned then rolls over to a CA of the operator's own.
	caSourceAnnotation = "proxy.open-cluster-management.io/ca-source"
	caSourceProvided   = "Provided"
	// caSourceAdopted marks a CA the operator found in the signer secret without having written it: the existing
	// add-on's, on a hub that switches to the operator. It keeps signing as a self-signed CA of the operator's own.
	caSourceAdopted = "Adopted"
	// adoptedProxyClientsAnnotation on the signer secret lists, comma-separated, the hex SHA-256 fingerprints of the
	// proxy-client certificates the adopted CA had issued (read from the proxy-client Secret when the CA was adopted);
	// the proxy-servers let them reach every cluster (contract.AdoptedProxyClientFlag) until the CA rotates.
	adoptedProxyClientsAnnotation = "proxy.open-cluster-management.io/adopted-proxy-clients"
	// CARolloverGrace is how long, by default (Reconciler.RolloverGrace), the previous CA stays in the bundle after
	// every certificate it signed was re-issued: pods serve the new certificates only once the kubelet has updated
	// their Secret volumes (its sync period plus its cache's TTL, about a minute each), and a client that read a
	// bundle without the old CA must trust them.
	CARolloverGrace = 3 * time.Minute
)

// reconcileSigner makes the CA ready to sign (generating or rotating a self-signed one, taking in a Provided one) and
// publishes the bundle every peer trusts: the current CA plus, during a rollover, each earlier CA that still has live
// certificates.
func (r *Reconciler) reconcileSigner(ctx context.Context, s *scope) (ctrl.Result, error) {
	mpc := s.mpc
	if err := r.disownSignerSecret(ctx, mpc); err != nil {
		return ctrl.Result{}, err
	}
	var secret *corev1.Secret
	var err error
	if mpc.Spec.Authentication.Signer.Type == proxyv1alpha1.Provided {
		secret, s.ca, err = r.ensureProvidedCA(ctx, mpc)
	} else {
		secret, s.ca, err = r.ensureSelfSignedCA(ctx, mpc)
	}
	// A Provided secret that is missing or unusable leaves the last good CA signing: notReady says why.
	var notReady *signer.NotReadyError
	if errors.As(err, &notReady) && s.ca == nil {
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionSignerReady, false, notReady.Reason, notReady.Message)
		return ctrl.Result{RequeueAfter: notReadyRecheck}, nil
	}
	if err != nil && notReady == nil {
		return ctrl.Result{}, err
	}

	s.adoptedClients = adoptedProxyClientsOf(secret)
	retained, err := r.retainedCAs(ctx, mpc, s.ca.Cert, secret)
	if err != nil {
		return ctrl.Result{}, err
	}
	var graceLeft time.Duration
	finish := len(retained) == 0 && len(secret.Data[signer.KeyPreviousCA]) > 0
	if finish {
		if graceLeft, err = r.previousCAGrace(ctx, mpc, secret); err != nil {
			return ctrl.Result{}, err
		}
		if graceLeft > 0 {
			// Unused, but maybe still served: it stays trusted until the pods have the new certificates.
			finish = false
			retained, _ = certs.ParseCertificates(secret.Data[signer.KeyPreviousCA])
		}
	}
	bundle := append([]*x509.Certificate{s.ca.Cert}, retained...)
	s.bundle = certs.EncodeBundle(bundle...)
	if _, err := apply.Ensure(ctx, r.Client, render.CABundleSecret(mpc, s.bundle)); err != nil {
		return ctrl.Result{}, err
	}
	if finish {
		if err := r.finishRollover(ctx, mpc, secret); err != nil {
			return ctrl.Result{}, err
		}
	}

	s.status.Signer = &proxyv1alpha1.SignerStatus{CAFingerprint: certs.Fingerprint(s.ca.Cert), CANotAfter: &metav1.Time{Time: s.ca.Cert.NotAfter}}
	for _, c := range bundle {
		s.status.Signer.BundleFingerprints = append(s.status.Signer.BundleFingerprints, certs.Fingerprint(c))
	}
	result := ctrl.Result{RequeueAfter: graceLeft}
	if mpc.Spec.Authentication.Signer.Type == proxyv1alpha1.Provided {
		result = lowestRequeue(result, ctrl.Result{RequeueAfter: providedSignerRecheck})
	}
	switch {
	case notReady != nil:
		r.warnKeptCA(mpc, s.status, notReady)
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionSignerReady, false, notReady.Reason,
			fmt.Sprintf("%s; the last good CA %s keeps signing", notReady.Message, certs.Fingerprint(s.ca.Cert)))
		result = lowestRequeue(result, ctrl.Result{RequeueAfter: notReadyRecheck})
	case len(retained) > 0:
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionSignerReady, true, proxyv1alpha1.ReasonCARollover,
			fmt.Sprintf("CA %s signs; %d earlier CA(s) stay trusted until every certificate they issued is re-issued", certs.Fingerprint(s.ca.Cert), len(retained)))
	default:
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionSignerReady, true, proxyv1alpha1.ReasonSignerReady,
			fmt.Sprintf("CA %s signs, valid until %s", certs.Fingerprint(s.ca.Cert), s.ca.Cert.NotAfter.UTC().Format(time.RFC3339)))
	}
	return result, nil
}

// warnKeptCA emits a Warning Event when the Provided secret turns unusable (or unusable for another reason) while an
// earlier CA keeps signing; the condition carries it for as long as it lasts.
func (r *Reconciler) warnKeptCA(mpc *proxyv1alpha1.ManagedProxyConfiguration, status *proxyv1alpha1.ManagedProxyConfigurationStatus, notReady *signer.NotReadyError) {
	if c := meta.FindStatusCondition(status.Conditions, proxyv1alpha1.ConditionSignerReady); c != nil && c.Status == metav1.ConditionFalse && c.Reason == notReady.Reason {
		return
	}
	r.Recorder.Eventf(mpc, nil, corev1.EventTypeWarning, notReady.Reason, "ReadProvidedCA", "%s; the last good CA keeps signing", notReady.Message)
}

// previousCAGrace is how long the previous CA, which signs no live certificate any more, stays in the bundle: it
// records the moment it found it unused on the signer secret, and answers what is left of the rollover grace since.
func (r *Reconciler) previousCAGrace(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, secret *corev1.Secret) (time.Duration, error) {
	now := r.Clock.Now()
	since, err := time.Parse(time.RFC3339, secret.Annotations[previousCAUnusedAnnotation])
	if err != nil {
		since = now
		annotations := carriedAnnotations(secret)
		annotations[previousCAUnusedAnnotation] = now.UTC().Format(time.RFC3339)
		if _, err := r.writeSignerSecret(ctx, mpc, secret.Data, annotations); err != nil {
			return 0, err
		}
	}
	return max(since.Add(r.rolloverGrace()).Sub(now), 0), nil
}

// rolloverGrace is RolloverGrace, or CARolloverGrace when unset.
func (r *Reconciler) rolloverGrace() time.Duration {
	if r.RolloverGrace > 0 {
		return r.RolloverGrace
	}
	return CARolloverGrace
}

// ensureSelfSignedCA generates the CA once, and rotates it when 2/3 of its life has passed, a rotation was requested
// with RotateCAAnnotation, or the CA is one a Provided secret gave.
func (r *Reconciler) ensureSelfSignedCA(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration) (*corev1.Secret, *certs.KeyPair, error) {
	now := r.Clock.Now()
	secret, ca, err := signer.ReadCA(ctx, r.Client, mpc)
	var notReady *signer.NotReadyError
	if err != nil && !errors.As(err, &notReady) {
		return nil, nil, err
	}
	requested := mpc.Annotations[proxyv1alpha1.RotateCAAnnotation]
	if secret == nil {
		// Not in the cache, which holds only the secrets the operator labelled: the existing add-on may have left its
		// CA there, which every agent and every hub client trusts. It is taken over, never replaced.
		if adopted, fromAddOn, err := r.adoptCA(ctx, mpc, requested); err != nil || adopted != nil {
			return fromAddOn, adopted, err
		}
	}
	if ca == nil {
		// Missing or unusable: the operator owns this secret, so it makes a new CA.
		next, err := certs.NewCA(CACommonName, CAValidity, now)
		if err != nil {
			return nil, nil, err
		}
		secret, err := r.writeSignerSecret(ctx, mpc, map[string][]byte{signer.KeyCACert: next.CertPEM, signer.KeyCAKey: next.KeyPEM},
			map[string]string{rotationHandledAnnotation: requested})
		if err != nil {
			return nil, nil, err
		}
		r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "CAGenerated", "GenerateCA", "Generated CA %s in secret %s/%s", certs.Fingerprint(next.Cert), secret.Namespace, secret.Name)
		return secret, next, nil
	}
	rotationRequested := requested != "" && requested != secret.Annotations[rotationHandledAnnotation]
	wasProvided := secret.Annotations[caSourceAnnotation] == caSourceProvided
	if !rotationRequested && !wasProvided && !certs.CANeedsRotation(ca.Cert, now) {
		return secret, ca, nil
	}
	next, err := certs.NewCA(CACommonName, CAValidity, now)
	if err != nil {
		return nil, nil, err
	}
	return r.rollOver(ctx, mpc, ca, next, map[string]string{rotationHandledAnnotation: requested})
}

// adoptCA takes over a usable CA that the signer secret holds though the operator did not write it (the existing
// add-on's cluster-proxy-signer, with the same keys): it labels the secret as the operator's, keeps the CA and its key
// as they are, byte for byte, and records the fingerprints of the proxy-client certificates that CA issued into the proxy-client
// Secret, which hub programs may hold from before the switch. It returns no CA when there is none to adopt.
func (r *Reconciler) adoptCA(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, requested string) (*certs.KeyPair, *corev1.Secret, error) {
	live := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, signer.SecretKey(mpc), live); err != nil {
		return nil, nil, client.IgnoreNotFound(err)
	}
	ca, err := certs.ParseCA(live.Data[signer.KeyCACert], live.Data[signer.KeyCAKey])
	if err != nil {
		return nil, nil, nil // unusable: replaced by a CA of the operator's, as a broken secret of its own would be
	}
	if live.Labels[render.ManagedByLabel] == render.ManagedByValue {
		return ca, live, nil // the operator's own, written a moment ago and not in the cache yet: nothing to adopt
	}
	annotations := map[string]string{rotationHandledAnnotation: requested, caSourceAnnotation: caSourceAdopted}
	fingerprints, err := r.adoptedProxyClients(ctx, mpc, ca)
	if err != nil {
		return nil, nil, err
	}
	annotations[adoptedProxyClientsAnnotation] = strings.Join(fingerprints, ",")
	// The bytes stay the add-on's own (its key is PKCS#8, which its manager alone parses): after a rollback it reads
	// the secret as it wrote it.
	secret, err := r.writeSignerSecret(ctx, mpc, map[string][]byte{signer.KeyCACert: live.Data[signer.KeyCACert], signer.KeyCAKey: live.Data[signer.KeyCAKey]}, annotations)
	if err != nil {
		return nil, nil, err
	}
	r.swept.Store(false) // the switch from the add-on: look for its leftovers again
	r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "CAAdopted", "AdoptCA", "Took over CA %s from secret %s/%s, which the operator "+
		"did not write (the existing add-on's); %d proxy-client certificate(s) it issued keep reaching every cluster",
		certs.Fingerprint(ca.Cert), secret.Namespace, secret.Name, len(fingerprints))
	return ca, secret, nil
}

// adoptedProxyClients are the hex SHA-256 fingerprints of the certificates in the proxy-client Secret that ca signed
// for client authentication and that are not the operator's own (no role URI): the existing add-on's proxy-client.
func (r *Reconciler) adoptedProxyClients(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, ca *certs.KeyPair) ([]string, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: contract.Namespace(mpc), Name: contract.SecretNamesOf(mpc).ProxyClient}
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	found, err := certs.ParseCertificates(secret.Data[corev1.TLSCertKey])
	if err != nil || len(found) == 0 {
		return nil, nil
	}
	leaf := found[0]
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: r.Clock.Now()}); err != nil {
		return nil, nil
	}
	if contract.HasRole(leaf, contract.ProxyClientRoleURI) {
		return nil, nil // the operator's own: it needs no exception
	}
	sum := sha256.Sum256(leaf.Raw)
	return []string{hex.EncodeToString(sum[:])}, nil
}

// adoptedProxyClientsOf are the fingerprints adoptedProxyClientsAnnotation lists on the signer secret.
func adoptedProxyClientsOf(secret *corev1.Secret) []string {
	if secret == nil || secret.Annotations[adoptedProxyClientsAnnotation] == "" {
		return nil
	}
	return strings.Split(secret.Annotations[adoptedProxyClientsAnnotation], ",")
}

// ensureProvidedCA takes the CA of the Provided secret in: the first time as it is, and when it changes by a rollover
// from the CA signing so far, as a self-signed rotation does. While the secret is missing or unusable, the CA signing
// so far (the last good one) keeps signing and the NotReadyError says why; it is returned alone only when there is
// none.
func (r *Reconciler) ensureProvidedCA(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration) (*corev1.Secret, *certs.KeyPair, error) {
	secret, current, err := signer.ReadCA(ctx, r.Client, mpc)
	var notReady *signer.NotReadyError
	if err != nil && !errors.As(err, &notReady) {
		return nil, nil, err
	}
	provided, err := signer.ReadProvided(ctx, r.APIReader, mpc)
	if err != nil {
		if current == nil || !errors.As(err, &notReady) {
			return nil, nil, err
		}
		return secret, current, err
	}
	annotations := map[string]string{caSourceAnnotation: caSourceProvided}
	if current == nil {
		secret, err := r.writeSignerSecret(ctx, mpc, map[string][]byte{signer.KeyCACert: provided.CertPEM, signer.KeyCAKey: provided.KeyPEM}, annotations)
		if err != nil {
			return nil, nil, err
		}
		r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "CAProvided", "ReadProvidedCA", "Signing with the provided CA %s", certs.Fingerprint(provided.Cert))
		return secret, provided, nil
	}
	if certs.Fingerprint(current.Cert) == certs.Fingerprint(provided.Cert) {
		return secret, current, nil
	}
	return r.rollOver(ctx, mpc, current, provided, annotations)
}

// rollOver makes next the CA that signs, and keeps prev as the previous CA: both are published in the bundle before
// anything is issued under next, and next cross-signed by prev is served after the leaves issued during the
// overlap, so peers still holding a bundle with prev alone trust them.
func (r *Reconciler) rollOver(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, prev, next *certs.KeyPair, annotations map[string]string) (*corev1.Secret, *certs.KeyPair, error) {
	data := map[string][]byte{
		signer.KeyCACert:     next.CertPEM,
		signer.KeyCAKey:      next.KeyPEM,
		signer.KeyPreviousCA: certs.EncodeBundle(prev.Cert),
	}
	note := "both stay trusted until every certificate is re-issued"
	if _, crossPEM, err := certs.CrossSign(next, prev, r.Clock.Now()); err == nil {
		data[signer.KeyCrossSignedCA] = crossPEM
	} else {
		// An expired previous CA vouches for nothing: peers trusting it alone are lost anyway.
		note = fmt.Sprintf("both stay trusted until every certificate is re-issued; no cross-signed CA (%v)", err)
	}
	secret, err := r.writeSignerSecret(ctx, mpc, data, annotations)
	if err != nil {
		return nil, nil, err
	}
	r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "CARotated", "RotateCA", "Rotated CA %s to %s; %s",
		certs.Fingerprint(prev.Cert), certs.Fingerprint(next.Cert), note)
	return secret, next, nil
}

// writeSignerSecret writes the signer secret with data and the non-empty annotations.
func (r *Reconciler) writeSignerSecret(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, data map[string][]byte, annotations map[string]string) (*corev1.Secret, error) {
	kept := map[string]string{}
	for k, v := range annotations {
		if v != "" {
			kept[k] = v
		}
	}
	if len(kept) == 0 {
		kept = nil
	}
	secret := render.SignerSecret(mpc, signer.SecretKey(mpc).Name, data, kept)
	if _, err := apply.Ensure(ctx, r.Client, secret); err != nil {
		return nil, err
	}
	return secret, nil
}

// disownSignerSecret removes the owner references to a ManagedProxyConfiguration that the signer secret carries
// from operators before it outlived its configuration: the garbage collector would delete the CA every agent and hub
// client trusts with the configuration (helm uninstall deletes it). The secret is applied only when its CA changes,
// so the render without an owner reference would never reach one written before; steady state, with none left,
// writes nothing.
func (r *Reconciler) disownSignerSecret(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration) error {
	live := &corev1.Secret{}
	if err := r.Client.Get(ctx, signer.SecretKey(mpc), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	kept := slices.DeleteFunc(slices.Clone(live.OwnerReferences), isConfigurationOwner)
	if len(kept) == len(live.OwnerReferences) {
		return nil
	}
	if len(kept) == 0 {
		kept = nil
	}
	disowned := live.DeepCopy()
	disowned.OwnerReferences = kept
	// A merge patch replaces the list whoever wrote it; the lock keeps an owner added meanwhile.
	if err := r.Client.Patch(ctx, disowned, client.MergeFromWithOptions(live, client.MergeFromWithOptimisticLock{}), client.FieldOwner(apply.FieldOwner)); err != nil {
		return fmt.Errorf("remove the configuration's owner reference from signer secret %s: %w", signer.SecretKey(mpc), err)
	}
	ctrl.LoggerFrom(ctx).Info("Removed the configuration's owner reference from the signer secret, so the CA outlives the configuration",
		"secret", klog.KObj(live))
	return nil
}

// isConfigurationOwner reports whether ref names a ManagedProxyConfiguration, of any UID: one deleted and created
// again leaves the reference to the old one.
func isConfigurationOwner(ref metav1.OwnerReference) bool {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == proxyv1alpha1.GroupVersion.Group && ref.Kind == "ManagedProxyConfiguration"
}

// carriedAnnotations are the annotations of the signer secret that outlive a rollover's steps: the rotation request
// handled and where the CA came from.
func carriedAnnotations(secret *corev1.Secret) map[string]string {
	return map[string]string{
		rotationHandledAnnotation:     secret.Annotations[rotationHandledAnnotation],
		caSourceAnnotation:            secret.Annotations[caSourceAnnotation],
		adoptedProxyClientsAnnotation: secret.Annotations[adoptedProxyClientsAnnotation],
	}
}

// finishRollover forgets the previous CA once nothing issued by it remains.
func (r *Reconciler) finishRollover(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, secret *corev1.Secret) error {
	data := map[string][]byte{signer.KeyCACert: secret.Data[signer.KeyCACert], signer.KeyCAKey: secret.Data[signer.KeyCAKey]}
	if _, err := r.writeSignerSecret(ctx, mpc, data, carriedAnnotations(secret)); err != nil {
		return err
	}
	r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "CARolloverComplete", "RotateCA", "Every certificate is issued by CA %s; earlier CAs left the bundle",
		certs.Fingerprint(mustParseFirst(secret.Data[signer.KeyCACert])))
	return nil
}

// retainedCAs are the earlier CAs (from the published bundle and the signer's previous CA) that still signed a
// live certificate of this issuer, so they must stay in the bundle.
func (r *Reconciler) retainedCAs(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, current *x509.Certificate, signerSecret *corev1.Secret) ([]*x509.Certificate, error) {
	var candidates []*x509.Certificate
	seen := map[string]bool{certs.Fingerprint(current): true}
	addCandidates := func(pemData []byte) {
		found, err := certs.ParseCertificates(pemData)
		if err != nil {
			return
		}
		for _, c := range found {
			if fp := certs.Fingerprint(c); !seen[fp] {
				seen[fp] = true
				candidates = append(candidates, c)
			}
		}
	}
	addCandidates(signerSecret.Data[signer.KeyPreviousCA])
	published := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: contract.Namespace(mpc), Name: proxyv1alpha1.CABundleSecretName}, published)
	if client.IgnoreNotFound(err) != nil {
		return nil, err
	}
	addCandidates(published.Data["ca.crt"])
	if len(candidates) == 0 {
		return nil, nil // only the current CA: nothing to look up, which is every pass outside a rotation
	}

	inUse, err := r.issuingFingerprints(ctx, mpc)
	if err != nil {
		return nil, err
	}
	agentCAs, err := r.agentAuthorityKeyIDs(ctx)
	if err != nil {
		return nil, err
	}
	var retained []*x509.Certificate
	for _, c := range candidates {
		if inUse[certs.Fingerprint(c)] || agentCAs[hex.EncodeToString(c.SubjectKeyId)] {
			retained = append(retained, c)
		}
	}
	return retained, nil
}

// issuingFingerprints are the CAs that signed the current certificate of every ProxyCertificate of this issuer.
func (r *Reconciler) issuingFingerprints(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration) (map[string]bool, error) {
	list := &proxyv1alpha1.ProxyCertificateList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index.IssuerName: mpc.Name}); err != nil {
		return nil, fmt.Errorf("list ProxyCertificates of %s: %w", mpc.Name, err)
	}
	inUse := map[string]bool{}
	for _, pc := range list.Items {
		if pc.Status.IssuerFingerprint != "" {
			inUse[pc.Status.IssuerFingerprint] = true
		}
	}
	return inUse, nil
}

// agentAuthorityKeyIDs are the CAs (by subject key ID) that signed the agent certificates in use on the clusters.
func (r *Reconciler) agentAuthorityKeyIDs(ctx context.Context) (map[string]bool, error) {
	list := &proxyv1alpha1.ClusterProxyStatusList{}
	// Read-only, and one per cluster: no deep copies of the cache.
	if err := r.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list ClusterProxyStatuses: %w", err)
	}
	ids := map[string]bool{}
	for _, cps := range list.Items {
		if id := cps.Status.AgentCertificateAuthorityKeyID; id != "" {
			ids[id] = true
		}
	}
	return ids, nil
}

func mustParseFirst(pemData []byte) *x509.Certificate {
	c, err := certs.ParseCertificates(pemData)
	if err != nil || len(c) == 0 {
		return nil
	}
	return c[0]
}
