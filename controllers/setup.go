// Package controllers wires the operator's reconcilers into a controller-runtime manager, one package per job:
// managedproxyconfiguration (the hub objects of a configuration), proxycertificate (issuing and renewal),
// clustercount (the configurations' cluster counts), clusteragent (one cluster's agent, add-on status and
// ClusterProxyStatus), agentcsr (approving and signing the agents' CSRs), addoninstall (the install strategy) and,
// where the hub serves ClusterProfiles, clusterprofile (the access provider of every cluster). They share only the
// cache indexes of package index; none imports another.
package controllers

import (
	"context"
	"errors"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/clock"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	workv1 "open-cluster-management.io/api/work/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/addoninstall"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/agentcsr"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/clusteragent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/clustercount"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/clusterprofile"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/index"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/managedproxyconfiguration"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/proxycertificate"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/addonapi"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/csrreview"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/intern"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/namespaces"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/metawrite"
)

// NewClientFunc is the manager's client: it speaks the hub's add-on API version v (package addonapi), and its
// creates and updates are answered with the written object's metadata only (package metawrite).
func NewClientFunc(v addonapi.Version) client.NewClientFunc {
	return func(cfg *rest.Config, opts client.Options) (client.Client, error) {
		c, err := client.New(cfg, opts)
		if err != nil {
			return nil, err
		}
		rc, err := metawrite.RESTClient(cfg, opts.HTTPClient, serializer.NewCodecFactory(c.Scheme()).WithoutConversion())
		if err != nil {
			return nil, err
		}
		return addonapi.NewClient(metawrite.NewClient(c, rc), v), nil
	}
}

// Namespaces are the hub namespaces the manager writes in; the zero value is every namespace.
type Namespaces struct {
	// ProxyServers are the namespaces of the proxy-servers: a ManagedProxyConfiguration whose
	// spec.proxyServer.namespace is another is refused.
	ProxyServers namespaces.Set
	// Certificates are the namespaces, beside ProxyServers, ProxyCertificates are issued into.
	Certificates namespaces.Set
}

// CacheOptions limits the cache to the core objects the operator owns (labelled managed-by) in the namespaces it
// writes in, so a large hub's namespaces, secrets, services and deployments are neither watched nor held in memory,
// and the manager needs no cluster-wide right to them. Managed fields are dropped, but for the objects
// apply.EnsureReplaced writes, which keep other writers' entries.
func CacheOptions(in Namespaces) cache.Options {
	// Every cached object's strings come from one pool: the conditions, owners and labels every cluster repeats are
	// held once (at 10,000 clusters, a third of the cache).
	strings := intern.NewPool(intern.DefaultSize)
	label := labels.SelectorFromSet(labels.Set{render.ManagedByLabel: render.ManagedByValue})
	owned := cache.ByObject{Label: label}
	servers := cache.ByObject{Label: label, Namespaces: in.ProxyServers.Cache()}
	secrets := cache.ByObject{Label: label, Namespaces: in.ProxyServers.Union(in.Certificates).Cache()}
	return cache.Options{DefaultTransform: strings.Transform(cache.TransformStripManagedFields()), ByObject: map[client.Object]cache.ByObject{
		&proxyv1alpha1.ClusterProxyStatus{}: {Transform: strings.Transform(apply.KeepForeignManagedFields)},
		&corev1.Namespace{}:                 owned,
		&corev1.Secret{}:                    secrets,
		&corev1.ConfigMap{}:                 servers,
		&corev1.Service{}:                   servers,
		&corev1.ServiceAccount{}:            servers,
		&appsv1.Deployment{}:                servers,
		&policyv1.PodDisruptionBudget{}:     servers,
		&rbacv1.Role{}:                      servers,
		&rbacv1.RoleBinding{}:               servers,
		&rbacv1.ClusterRoleBinding{}:        owned,
		&networkingv1.NetworkPolicy{}:       servers,
		// The proxy-servers' endpoints (the EndpointSlice controller copies the Service's labels): tunnel health
		// asks every replica.
		&discoveryv1.EndpointSlice{}: servers,
		// The proxy-server pods, whose names are the only targets of the agents' port-forwards.
		&corev1.Pod{}: {Label: labels.SelectorFromSet(labels.Set{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer}),
			Namespaces: in.ProxyServers.Cache()},
		&workv1.ManifestWork{}: {Label: owned.Label, Transform: strings.Transform(clusteragent.TrimCachedWork)},
		// Other add-ons' objects are none of the operator's business.
		&addonv1alpha1.ManagedClusterAddOn{}:    {Field: fields.OneTermEqualSelector("metadata.name", proxyv1alpha1.AddonName)},
		&addonv1alpha1.ClusterManagementAddOn{}: {Field: fields.OneTermEqualSelector("metadata.name", proxyv1alpha1.AddonName)},
		// The gateway's APIService, the one the manager writes: RBAC grants it by name.
		&apiregistrationv1.APIService{}:             {Field: fields.OneTermEqualSelector("metadata.name", proxyv1alpha1.GatewayAPIServiceName)},
		&certificatesv1.CertificateSigningRequest{}: {Label: labels.SelectorFromSet(labels.Set{csrreview.AddonNameLabel: proxyv1alpha1.AddonName})},
	}}
}

// Options configure the reconcilers.
type Options struct {
	// Clock is the time source of certificate decisions; tests pass a fake one.
	Clock clock.PassiveClock
	// Tunnels reports tunnel health per cluster (internal/hub/tunnelhealth in the manager); nil leaves the tunnel
	// conditions Unknown and the add-on's Available to OCM's Lease check.
	Tunnels clusteragent.TunnelSource
	// Records reports the proxy-servers' record sinks, and RecordChanges tells when they change (tunnelhealth too);
	// nil leaves the configuration without RecordsWritable.
	Records       managedproxyconfiguration.RecordSource
	RecordChanges <-chan event.TypedGenericEvent[string]
	// CountsDelay is how long the cluster counts wait for more changes (clustercount.DefaultDelay when zero).
	CountsDelay time.Duration
	// TLSProfileNamespace is where OCM's ocm-tls-profile ConfigMap is read from (the manager's namespace); "" reads
	// none.
	TLSProfileNamespace string
	// HubServer is the hub kube-apiserver's URL as ClusterProfile consumers reach it (the hub provider's server);
	// "" is clusterprofile.DefaultHubServer.
	HubServer string
	// CARolloverGrace is how long a rotated CA stays trusted after its last certificate was re-issued
	// (managedproxyconfiguration.CARolloverGrace when zero).
	CARolloverGrace time.Duration
	// Namespaces are where the manager writes, as CacheOptions was given them.
	Namespaces Namespaces
	// AddOnAPI is the add-on API version the hub serves, as the manager's client speaks it (NewClientFunc); the
	// uncached reads speak it too. Empty is v1alpha1.
	AddOnAPI addonapi.Version
}

// hubCA is the CA of the manager's own connection to the hub: its pod's ServiceAccount CA file, read again on every
// call since the kubelet renews it.
func hubCA(cfg *rest.Config) func() ([]byte, error) {
	return func() ([]byte, error) {
		if len(cfg.CAData) > 0 {
			return cfg.CAData, nil
		}
		if cfg.CAFile == "" {
			return nil, errors.New("the manager's hub configuration has no CA")
		}
		return os.ReadFile(cfg.CAFile)
	}
}

// Setup registers the field indexes and every reconciler with mgr.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if err := index.Register(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	if opts.Tunnels != nil {
		// Tunnel health lists the proxy-servers' EndpointSlices, which no controller watches: their informer starts
		// with the cache, not on the first round that gets that far, which may come at any time, at steady state too.
		if _, err := mgr.GetCache().GetInformer(ctx, &discoveryv1.EndpointSlice{}); err != nil {
			return err
		}
	}
	recorder := mgr.GetEventRecorder("cluster-proxy-operator")
	apiReader := addonapi.NewReader(mgr.GetAPIReader(), opts.AddOnAPI)
	options := controller.Options{RateLimiter: RateLimiter()}
	configurations := &managedproxyconfiguration.Reconciler{Client: mgr.GetClient(), APIReader: apiReader, Clock: opts.Clock,
		Recorder: recorder, RolloverGrace: opts.CARolloverGrace, Namespaces: opts.Namespaces.ProxyServers,
		Records: opts.Records, RecordChanges: opts.RecordChanges}
	if opts.TLSProfileNamespace != "" {
		// One ConfigMap of one namespace: a cache of its own, as the manager's holds only the objects it owns.
		profiles, err := cache.New(mgr.GetConfig(), cache.Options{
			Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
			DefaultNamespaces: map[string]cache.Config{opts.TLSProfileNamespace: {}},
			ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {
				Field: fields.OneTermEqualSelector("metadata.name", managedproxyconfiguration.OCMTLSProfileName)}},
			DefaultTransform: cache.TransformStripManagedFields(),
		})
		if err != nil {
			return err
		}
		if err := mgr.Add(profiles); err != nil {
			return err
		}
		configurations.OCMTLSProfile, configurations.OCMTLSProfileNamespace = profiles, opts.TLSProfileNamespace
	}
	reconcilers := []interface {
		SetupWithManager(ctrl.Manager, controller.Options) error
	}{
		configurations,
		&proxycertificate.Reconciler{Client: mgr.GetClient(), APIReader: apiReader, Clock: opts.Clock, Recorder: recorder,
			Namespaces: opts.Namespaces.ProxyServers.Union(opts.Namespaces.Certificates)},
		&clustercount.Reconciler{Client: mgr.GetClient(), Delay: opts.CountsDelay},
		&agentcsr.Reconciler{Client: mgr.GetClient(), APIReader: apiReader, Clock: opts.Clock, Recorder: recorder},
		&addoninstall.Reconciler{Client: mgr.GetClient()},
	}
	profiles, err := clusterprofile.Served(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	if profiles {
		reconcilers = append(reconcilers, &clusterprofile.Reconciler{Client: mgr.GetClient(), Recorder: recorder,
			HubServer: opts.HubServer, HubCA: hubCA(mgr.GetConfig())})
	} else {
		ctrl.Log.WithName("setup").Info("The hub does not serve ClusterProfiles (multicluster.x-k8s.io/v1alpha1): no access " +
			"providers are published. Turn on OCM's ClusterProfile feature, then restart the manager.")
	}
	for _, r := range reconcilers {
		if err := r.SetupWithManager(mgr, options); err != nil {
			return err
		}
	}
	// One pass per cluster, the bulk of the work on a large hub: 16 at a time.
	return (&clusteragent.Reconciler{
		Client: mgr.GetClient(), APIReader: apiReader, Clock: opts.Clock, Tunnels: opts.Tunnels, Recorder: recorder,
	}).SetupWithManager(mgr, controller.Options{RateLimiter: RateLimiter(), MaxConcurrentReconciles: 16})
}

// RateLimiter retries a failed reconcile after 5ms, doubling up to 30s: hub objects are few, and a user who fixes
// what blocked a reconcile should not wait the default 16 minutes.
func RateLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, 30*time.Second)
}
