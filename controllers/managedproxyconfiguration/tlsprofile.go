package managedproxyconfiguration

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
)

// OCMTLSProfileName is OCM's TLS profile ConfigMap (keys minTLSVersion and cipherSuites, comma-separated), which
// OCM's components read from their own namespace.
const OCMTLSProfileName = "ocm-tls-profile"

// profileSource is where a TLS profile came from: its description and the prefix of its fields.
type profileSource struct{ name, fieldPrefix string }

// tlsProfile is the profile the configuration asks for: spec.tlsProfile, else OCM's ocm-tls-profile ConfigMap in
// the manager's namespace, else the default.
func (r *Reconciler) tlsProfile(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration) (contract.TLSProfile, profileSource, error) {
	if p := mpc.Spec.TLSProfile; p != nil {
		return contract.TLSProfile{MinTLSVersion: p.MinTLSVersion, CipherSuites: p.CipherSuites},
			profileSource{"spec.tlsProfile", "spec.tlsProfile."}, nil
	}
	if r.OCMTLSProfile != nil {
		cm := &corev1.ConfigMap{}
		err := r.OCMTLSProfile.Get(ctx, client.ObjectKey{Namespace: r.OCMTLSProfileNamespace, Name: OCMTLSProfileName}, cm)
		if err == nil {
			profile := contract.TLSProfile{MinTLSVersion: cm.Data["minTLSVersion"]}
			for _, name := range strings.Split(cm.Data["cipherSuites"], ",") {
				if name = strings.TrimSpace(name); name != "" {
					profile.CipherSuites = append(profile.CipherSuites, name)
				}
			}
			where := fmt.Sprintf("ConfigMap %s/%s", r.OCMTLSProfileNamespace, OCMTLSProfileName)
			return profile, profileSource{where, where + " data."}, nil
		}
		if !apierrors.IsNotFound(err) {
			return contract.TLSProfile{}, profileSource{}, err
		}
	}
	return contract.TLSProfile{}, profileSource{name: "the default"}, nil
}

// reconcileTLSProfile publishes the profile for the proxy-servers, which re-read it. A bad profile is reported by
// its field and the published one stays: the servers keep what worked.
func (r *Reconciler) reconcileTLSProfile(ctx context.Context, s *scope) (ctrl.Result, error) {
	mpc := s.mpc
	profile, source, err := r.tlsProfile(ctx, mpc)
	if err != nil {
		return ctrl.Result{}, err
	}
	var bad *contract.TLSProfileError
	if errors.As(profile.Validate(), &bad) {
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionTLSProfileApplied, false, proxyv1alpha1.ReasonInvalidTLSProfile,
			fmt.Sprintf("%s%s: %s; the proxy-servers keep the profile they have", source.fieldPrefix, bad.Field, bad.Message))
		profile = contract.TLSProfile{} // published only when none is: the default
		live := &corev1.ConfigMap{}
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: contract.Namespace(mpc), Name: render.TLSProfileConfigMapName(mpc)}, live)
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
	}
	cm, err := render.TLSProfileConfigMap(mpc, profile)
	if err != nil {
		return ctrl.Result{}, err
	}
	if _, err := apply.Ensure(ctx, r.Client, cm); err != nil {
		return ctrl.Result{}, err
	}
	if bad == nil {
		version := profile.MinTLSVersion
		if version == "" {
			version = "VersionTLS12"
		}
		suites := "Go's secure cipher suites"
		if n := len(profile.CipherSuites); n > 0 {
			suites = fmt.Sprintf("%d cipher suites", n)
		}
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionTLSProfileApplied, true, proxyv1alpha1.ReasonTLSProfileApplied,
			fmt.Sprintf("minimum %s, %s, from %s", version, suites, source.name))
	}
	return ctrl.Result{}, nil
}
