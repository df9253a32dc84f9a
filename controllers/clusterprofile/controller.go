// Package clusterprofile publishes, in the status of every ClusterProfile that OCM keeps for a managed cluster, an
// access provider that reaches the cluster through the user-server: the server URL, the CA that signs the
// user-server's certificate, and the cluster's name as the exec extension. sig-multicluster's consumers (Kueue
// MultiKueue, Argo CD, multicluster-runtime) build a rest.Config from it with sigs.k8s.io/cluster-inventory-api's
// pkg/access and a credential plugin of their provider file (kubectl-cluster_proxy credential).
package clusterprofile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"k8s.io/client-go/tools/events"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/addonconfig"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/extendedspec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

const (
	// ProviderName names the access provider this package publishes, as OCM's cluster-proxy add-on names it, so a
	// consumer's provider file written for OCM keeps working.
	ProviderName = "open-cluster-management"
	// HubProviderName names the access provider through the hub's own API: its server is the hub kube-apiserver's
	// path to the cluster (gateway.proxy.open-cluster-management.io clusters/<cluster>/proxy), and a consumer reaches
	// the cluster with its own hub credentials, under the hub's RBAC for that cluster.
	HubProviderName = "open-cluster-management-hub"
	// DefaultHubServer is the hub kube-apiserver as pods of the hub reach it.
	DefaultHubServer = "https://kubernetes.default.svc"
	// ClusterManagerName is the cluster manager of the ClusterProfiles OCM keeps (spec.clusterManager.name).
	ClusterManagerName = "open-cluster-management"
	// ClusterNameLabel names the managed cluster of a ClusterProfile; without it, the profile's name does.
	ClusterNameLabel = clusterv1.ClusterNameLabelKey
	// ExecExtension is the reserved kubeconfig extension a credential plugin receives in KUBERNETES_EXEC_INFO.
	ExecExtension = "client.authentication.k8s.io/exec"

	byCluster = "clusterprofile.cluster"
)

// GroupKind is the ClusterProfile API, which a hub serves only when OCM's ClusterProfile feature is on.
var GroupKind = schema.GroupKind{Group: cpv1alpha1.GroupVersion.Group, Kind: "ClusterProfile"}

// Served reports whether the hub serves the ClusterProfile API.
func Served(mapper meta.RESTMapper) (bool, error) {
	_, err := mapper.RESTMapping(GroupKind, cpv1alpha1.GroupVersion.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	return err == nil, err
}

// Reconciler keeps this product's entries in the status.accessProviders of one ClusterProfile.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// HubServer is the hub kube-apiserver's URL as consumers reach it, default DefaultHubServer.
	HubServer string
	// HubCA is the CA bundle that verifies HubServer (the manager's own: its pod's ServiceAccount CA); nil publishes
	// no hub provider.
	HubCA func() ([]byte, error)
}

// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=clusterprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=multicluster.x-k8s.io,resources=clusterprofiles/status,verbs=get;update;patch

// Reconcile puts the access providers in place, brings them up to date, or removes them: the user-server's when the
// cluster has no add-on whose configuration serves the user-server, the hub's when the cluster has no add-on of the
// default configuration (whose proxy-servers serve the hub's aggregated API). Other providers stay as they are.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	profile := &cpv1alpha1.ClusterProfile{}
	if err := r.Client.Get(ctx, req.NamespacedName, profile); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if profile.Spec.ClusterManager.Name != ClusterManagerName || !profile.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	want, hub, err := r.providers(ctx, profile)
	if err != nil {
		return ctrl.Result{}, err
	}
	next := WithProvider(WithProvider(profile.Status.AccessProviders, ProviderName, want), HubProviderName, hub)
	if equality.Semantic.DeepEqual(next, profile.Status.AccessProviders) {
		return ctrl.Result{}, nil
	}
	before := profile.DeepCopy()
	profile.Status.AccessProviders = next
	if err := apply.UpdateStatus(ctx, r.Client, before, profile); err != nil {
		return ctrl.Result{}, err
	}
	if (want != nil || hub != nil) && !equality.Semantic.DeepEqual(profile.Status.AccessProviders, next) {
		// The server pruned what it was given: a ClusterProfile CRD older than status.accessProviders.
		r.Recorder.Eventf(profile, nil, corev1.EventTypeWarning, proxyv1alpha1.ReasonAccessProvidersNotStored, "PublishAccessProvider",
			"the hub's ClusterProfile CRD does not keep status.accessProviders: install the CRD of "+
				"sigs.k8s.io/cluster-inventory-api v0.1.3 or later")
	}
	return ctrl.Result{}, nil
}

// ClusterOf is the managed cluster a ClusterProfile of OCM's stands for, and the field that names it.
func ClusterOf(profile *cpv1alpha1.ClusterProfile) (cluster, field string) {
	if name := profile.Labels[ClusterNameLabel]; name != "" {
		return name, "metadata.labels[" + ClusterNameLabel + "]"
	}
	return profile.Name, "metadata.name"
}

// providers are the access providers of the profile's cluster through the user-server and through the hub, nil for
// one it does not have. Why one is missing is logged at V(1): a provider that goes away says which object was missing.
func (r *Reconciler) providers(ctx context.Context, profile *cpv1alpha1.ClusterProfile) (userServer, hub *cpv1alpha1.AccessProvider, err error) {
	mpc, err := r.configuration(ctx, profile)
	if mpc == nil || err != nil {
		return nil, nil, err
	}
	cluster, _ := ClusterOf(profile)
	if mpc.Name == proxyv1alpha1.DefaultConfigurationName {
		if hub, err = r.hubProvider(cluster); err != nil {
			return nil, nil, err
		}
	}
	userServer, err = r.userServerProvider(ctx, cluster, mpc)
	return userServer, hub, err
}

// hubProvider is the access provider of cluster through the hub's own API; nil without a hub CA.
func (r *Reconciler) hubProvider(cluster string) (*cpv1alpha1.AccessProvider, error) {
	if r.HubCA == nil {
		return nil, nil
	}
	ca, err := r.HubCA()
	if err != nil {
		return nil, fmt.Errorf("the hub's CA: %w", err)
	}
	server := r.HubServer
	if server == "" {
		server = DefaultHubServer
	}
	return HubProvider(cluster, server, ca)
}

// configuration is the ManagedProxyConfiguration of the add-on of the profile's cluster, nil when there is none.
func (r *Reconciler) configuration(ctx context.Context, profile *cpv1alpha1.ClusterProfile) (*proxyv1alpha1.ManagedProxyConfiguration, error) {
	cluster, field := ClusterOf(profile)
	none := func(why string, keysAndValues ...any) (*proxyv1alpha1.ManagedProxyConfiguration, error) {
		log.FromContext(ctx).V(1).Info("No access provider: "+why, append([]any{"cluster", cluster}, keysAndValues...)...)
		return nil, nil
	}
	managed := &metav1.PartialObjectMetadata{}
	managed.SetGroupVersionKind(clusterv1.SchemeGroupVersion.WithKind("ManagedCluster"))
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cluster}, managed); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		r.Recorder.Eventf(profile, nil, corev1.EventTypeWarning, proxyv1alpha1.ReasonUnknownCluster, "PublishAccessProvider",
			"%s names cluster %q, which is not a ManagedCluster: no access provider is published", field, cluster)
		return nil, nil
	}
	addOn := &addonv1alpha1.ManagedClusterAddOn{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cluster, Name: proxyv1alpha1.AddonName}, addOn); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		return none("the cluster has no add-on")
	}
	if !addOn.DeletionTimestamp.IsZero() {
		return none("the add-on is being deleted")
	}
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: addonconfig.ConfigurationOf(addOn)}, mpc); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		return none("the add-on's configuration does not exist", "configuration", addonconfig.ConfigurationOf(addOn))
	}
	extendedspec.Restore(mpc)
	return mpc, nil
}

// userServerProvider is the access provider of cluster through mpc's user-server, nil when it has none.
func (r *Reconciler) userServerProvider(ctx context.Context, cluster string, mpc *proxyv1alpha1.ManagedProxyConfiguration) (*cpv1alpha1.AccessProvider, error) {
	none := func(why string, keysAndValues ...any) (*cpv1alpha1.AccessProvider, error) {
		log.FromContext(ctx).V(1).Info("No user-server access provider: "+why, append([]any{"cluster", cluster}, keysAndValues...)...)
		return nil, nil
	}
	if mpc.Spec.UserServer == nil {
		return none("no user-server to reach the cluster through", "configuration", mpc.Name)
	}
	bundle := &corev1.Secret{}
	key := client.ObjectKey{Namespace: contract.Namespace(mpc), Name: proxyv1alpha1.CABundleSecretName}
	if err := r.Client.Get(ctx, key, bundle); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		return none("the CA bundle Secret does not exist", "secret", key.String())
	}
	if len(bundle.Data["ca.crt"]) == 0 {
		return none("the CA bundle Secret has no ca.crt", "secret", key.String(), "resourceVersion", bundle.ResourceVersion)
	}
	return Provider(cluster, contract.UserServerAddress(mpc), bundle.Data["ca.crt"])
}

// Provider is the access provider of cluster through the user-server at address (host:port), trusting ca.
func Provider(cluster, address string, ca []byte) (*cpv1alpha1.AccessProvider, error) {
	return accessProvider(ProviderName, cluster, fmt.Sprintf("https://%s/%s", address, cluster), ca)
}

// accessProvider is provider name's entry for cluster at server, trusting ca, with the cluster's name in the exec
// extension a credential plugin receives.
func accessProvider(name, cluster, server string, ca []byte) (*cpv1alpha1.AccessProvider, error) {
	ext, err := json.Marshal(map[string]string{"clusterName": cluster})
	if err != nil {
		return nil, err
	}
	return &cpv1alpha1.AccessProvider{Name: name, Cluster: clientcmdv1.Cluster{
		Server:                   server,
		CertificateAuthorityData: ca,
		Extensions:               []clientcmdv1.NamedExtension{{Name: ExecExtension, Extension: runtime.RawExtension{Raw: ext}}},
	}}, nil
}

// HubProvider is the access provider of cluster through the hub kube-apiserver at server (its aggregated API),
// trusting ca. It carries no credential: a consumer's provider file names the plugin that hands over its own.
func HubProvider(cluster, server string, ca []byte) (*cpv1alpha1.AccessProvider, error) {
	return accessProvider(HubProviderName, cluster, strings.TrimSuffix(server, "/")+clusterproxy.ViaHubPath(cluster), ca)
}

// WithProvider returns providers with the entry called name replaced by want, added (last) when missing, or removed
// when want is nil. The other entries keep their order.
func WithProvider(providers []cpv1alpha1.AccessProvider, name string, want *cpv1alpha1.AccessProvider) []cpv1alpha1.AccessProvider {
	out := make([]cpv1alpha1.AccessProvider, 0, len(providers)+1)
	placed := false
	for _, p := range providers {
		if p.Name != name {
			out = append(out, p)
			continue
		}
		if want != nil && !placed {
			out = append(out, *want)
			placed = true
		}
	}
	if want != nil && !placed {
		out = append(out, *want)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// SetupWithManager registers the reconciler. A profile passes when it is created or its spec or labels change, or
// another writer changed the access providers; its cluster's add-on and ManagedCluster, every configuration and the
// published CA bundle re-queue the profiles they concern.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &cpv1alpha1.ClusterProfile{}, byCluster, func(o client.Object) []string {
		cluster, _ := ClusterOf(o.(*cpv1alpha1.ClusterProfile))
		return []string{cluster}
	}); err != nil {
		return err
	}
	onlyOurAddOn := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == proxyv1alpha1.AddonName })
	return ctrl.NewControllerManagedBy(mgr).
		For(&cpv1alpha1.ClusterProfile{}, builder.WithPredicates(profileChanged)).
		Watches(&addonv1alpha1.ManagedClusterAddOn{}, handler.EnqueueRequestsFromMapFunc(r.profilesOfNamespace),
			builder.WithPredicates(onlyOurAddOn, predicate.GenerationChangedPredicate{})).
		Watches(&clusterv1.ManagedCluster{}, handler.EnqueueRequestsFromMapFunc(r.profilesOfName), builder.OnlyMetadata,
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&proxyv1alpha1.ManagedProxyConfiguration{}, handler.EnqueueRequestsFromMapFunc(r.allProfiles),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.allProfiles), builder.WithPredicates(
			predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == proxyv1alpha1.CABundleSecretName }))).
		Named("clusterprofile").
		WithOptions(opts).
		Complete(r)
}

// profileChanged passes a new profile, and an update that changed its spec, its labels or the access providers
// (a status write of OCM's that keeps them, such as a new cluster claim, does not).
var profileChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, ok1 := e.ObjectOld.(*cpv1alpha1.ClusterProfile)
		cur, ok2 := e.ObjectNew.(*cpv1alpha1.ClusterProfile)
		return !ok1 || !ok2 || old.Generation != cur.Generation ||
			!equality.Semantic.DeepEqual(old.Labels, cur.Labels) ||
			!equality.Semantic.DeepEqual(old.Status.AccessProviders, cur.Status.AccessProviders)
	},
	DeleteFunc: func(event.DeleteEvent) bool { return false },
}

func (r *Reconciler) profilesOfNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	return r.profilesOf(ctx, o.GetNamespace())
}

func (r *Reconciler) profilesOfName(ctx context.Context, o client.Object) []reconcile.Request {
	return r.profilesOf(ctx, o.GetName())
}

func (r *Reconciler) profilesOf(ctx context.Context, cluster string) []reconcile.Request {
	return index.Requests(ctx, r.Client, &cpv1alpha1.ClusterProfileList{}, client.MatchingFields{byCluster: cluster})
}

func (r *Reconciler) allProfiles(ctx context.Context, _ client.Object) []reconcile.Request {
	return index.Requests(ctx, r.Client, &cpv1alpha1.ClusterProfileList{})
}
