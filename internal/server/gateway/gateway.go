// Package gateway is the hub's aggregated API, gateway.proxy.open-cluster-management.io/v1alpha1, served by every
// proxy-server replica behind an APIService. It is a k8s.io/apiserver server: the hub kube-apiserver authenticates the
// user with whatever it accepts, authorizes clusters/proxy per cluster with the hub's RBAC, writes the request to the
// hub's audit log, and sends it here through its front proxy; this server authenticates the front proxy (delegated
// authentication, the CA in kube-system/extension-apiserver-authentication), authorizes again by SubjectAccessReview,
// and hands the request to the user-server, which sends it to the cluster as the user's identity (never a
// credential).
//
//   - clusters (get, list, watch): the managed clusters with the add-on, from their ClusterProxyStatus;
//   - clusters/<name>/proxy/<path> (every verb, upgrades included): the cluster's kube-apiserver at <path>.
package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericfilters "k8s.io/apiserver/pkg/server/filters"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/compatibility"

	gatewayv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/gateway/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/gateway/openapi"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// Forwarder sends a request to a cluster as a hub user (userserver.Server.ServeHubIdentity), and answers one this
// server refused (RefuseHubIdentity): both are logged, counted and audited alike.
type Forwarder interface {
	ServeHubIdentity(w http.ResponseWriter, r *http.Request, cluster, escapedPath string, id hubidentity.Identity)
	RefuseHubIdentity(w http.ResponseWriter, r *http.Request, cluster, escapedPath string, id hubidentity.Identity,
		code int, reason metav1.StatusReason, message string)
}

// Options configure the server.
type Options struct {
	// BindAddress and Port are where it listens (TLS); BindAddress "" is every interface.
	BindAddress string
	Port        int
	// CertFile and KeyFile are its serving certificate, re-read when they change. The hub kube-apiserver checks it
	// against the APIService's caBundle, for the name <service>.<namespace>.svc.
	CertFile, KeyFile string
	// TLSProfileFile is the TLS profile (contract.TLSProfile as JSON) of the proxy-server's listeners, "" for the
	// default. It is read once, when the server is built: k8s.io/apiserver fixes the TLS version and cipher suites of
	// its listener at start, so a change applies here when the proxy-server restarts.
	TLSProfileFile string
	// HubKubeconfig is the hub the server delegates authentication and authorization to and reads
	// ClusterProxyStatuses from; "" is the pod's own ServiceAccount.
	HubKubeconfig string
	// Forward sends proxied requests on.
	Forward Forwarder
	// ShutdownDelay is how long the server keeps serving after Run's context ends, while the Service's endpoints
	// stop sending to it.
	ShutdownDelay time.Duration

	// requestTimeout replaces the 60s timeout of requests that are not long-running, in tests.
	requestTimeout time.Duration
}

// Server is the aggregated API server.
type Server struct {
	generic *genericapiserver.GenericAPIServer
	hub     *clusterSet
	opts    Options
}

// New builds the server; Run serves it.
func New(opts Options) (*Server, error) {
	if opts.Forward == nil {
		return nil, fmt.Errorf("gateway: Options.Forward is required")
	}
	scheme := runtime.NewScheme()
	if err := gatewayv1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// What every API server registers for the common types (Status, discovery) as unversioned.
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	metav1.AddToGroupVersion(scheme, unversioned)
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{},
		&metav1.APIGroup{}, &metav1.APIResourceList{})
	codecs := serializer.NewCodecFactory(scheme)

	recommended := genericoptions.NewRecommendedOptions("", codecs.LegacyCodec(gatewayv1alpha1.GroupVersion))
	recommended.Etcd = nil // nothing is stored
	recommended.Admission = nil
	recommended.CoreAPI = nil
	recommended.EgressSelector = nil
	recommended.Traces = nil
	recommended.Features.EnablePriorityAndFairness = false // the hub kube-apiserver in front already applies it
	recommended.SecureServing.BindPort = opts.Port
	if opts.BindAddress != "" {
		recommended.SecureServing.BindAddress = net.ParseIP(opts.BindAddress)
	}
	recommended.SecureServing.ServerCert.CertKey.CertFile = opts.CertFile
	recommended.SecureServing.ServerCert.CertKey.KeyFile = opts.KeyFile
	recommended.Authentication.RemoteKubeConfigFile = opts.HubKubeconfig
	recommended.Authorization.RemoteKubeConfigFile = opts.HubKubeconfig
	if errs := recommended.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("gateway options: %v", errs)
	}

	config := genericapiserver.NewRecommendedConfig(codecs)
	config.EffectiveVersion = compatibility.NewEffectiveVersionFromString("1.37", "", "")
	// The hub kube-apiserver publishes the group's schema from these (kubectl explain, server-side field checks).
	namer := openapinamer.NewDefinitionNamer(scheme)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(openapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIConfig.Info.Title = "cluster-proxy gateway"
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(openapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIV3Config.Info.Title = "cluster-proxy gateway"
	if err := recommended.ApplyTo(config); err != nil {
		return nil, fmt.Errorf("gateway configuration: %w", err)
	}
	profile, err := tlsreload.NewProfile(opts.TLSProfileFile)
	if err != nil {
		return nil, fmt.Errorf("gateway TLS profile: %w", err)
	}
	config.SecureServing.MinTLSVersion, config.SecureServing.CipherSuites = profile.Current()
	// Only the hub kube-apiserver's front proxy authenticates here: a bearer token or a hub client certificate sent to
	// this port directly would pass by the hub's audit log and flow control.
	config.Authentication.Authenticator = frontProxyOnly(config.Authentication.RequestHeaderConfig)
	// A proxied request lasts as long as the cluster's answer: watches, logs -f, exec, port-forward. The default
	// timeout would cut them (after 60s).
	config.LongRunningFunc = genericfilters.BasicLongRunningRequestCheck(sets.NewString("watch", "proxy"), sets.NewString(gatewayv1alpha1.ProxySubresource))
	config.ShutdownDelayDuration = opts.ShutdownDelay
	if opts.requestTimeout > 0 {
		config.RequestTimeout = opts.requestTimeout
	}
	generic, err := config.Complete().New("cluster-proxy-gateway", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("gateway server: %w", err)
	}

	s := &Server{generic: generic, hub: newClusterSet(), opts: opts}
	group := genericapiserver.NewDefaultAPIGroupInfo(gatewayv1alpha1.GroupVersion.Group, scheme, runtime.NewParameterCodec(scheme), codecs)
	group.VersionedResourcesStorageMap[gatewayv1alpha1.GroupVersion.Version] = map[string]rest.Storage{
		gatewayv1alpha1.Resource: newClusterStorage(s.hub),
		gatewayv1alpha1.Resource + "/" + gatewayv1alpha1.ProxySubresource: &proxyStorage{clusters: s.hub, forward: opts.Forward,
			authorizer: config.Authorization.Authorizer},
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("gateway API group: %w", err)
	}
	return s, nil
}

// Run follows the hub's ClusterProxyStatuses and serves until ctx ends, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	hub, err := clientcmd.BuildConfigFromFlags("", s.opts.HubKubeconfig)
	if err != nil {
		return fmt.Errorf("gateway hub client: %w", err)
	}
	if err := followStatuses(ctx, hub, s.hub); err != nil {
		return err
	}
	return s.generic.PrepareRun().RunWithContext(ctx)
}

// proxyStorage serves clusters/<name>/proxy/<path>.
type proxyStorage struct {
	clusters *clusterSet
	forward  Forwarder
	// authorizer is the server's (the hub's RBAC by SubjectAccessReview), asked again for an upgrade: the hub
	// kube-apiserver authorized the request's method, get for a websocket exec, and a stream into a cluster needs create.
	authorizer authorizer.Authorizer
}

var _ rest.Connecter = &proxyStorage{}

func (*proxyStorage) New() runtime.Object { return &gatewayv1alpha1.ClusterProxyOptions{} }
func (*proxyStorage) Destroy()            {}

// NewConnectOptions asks for the path after proxy/ as the "path" option.
func (*proxyStorage) NewConnectOptions() (runtime.Object, bool, string) {
	return &gatewayv1alpha1.ClusterProxyOptions{}, true, "path"
}

// ConnectMethods are every method a kube-apiserver serves.
func (*proxyStorage) ConnectMethods() []string {
	return []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
}

func (p *proxyStorage) Connect(ctx context.Context, name string, _ runtime.Object, _ rest.Responder) (http.Handler, error) {
	u, ok := request.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewUnauthorized("no user in the request")
	}
	if !p.clusters.has(name) {
		return nil, apierrors.NewNotFound(resource, name)
	}
	id := hubidentity.Identity{User: u.GetName(), UID: u.GetUID(), Groups: u.GetGroups(), Extra: u.GetExtra()}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The front proxy's headers named the user to this server; the cluster gets the user as impersonation only.
		proxyhttp.RemoveHeaderPrefix(r.Header, "X-Remote-")
		path, ok := ProxyPath(r.URL.EscapedPath(), name)
		if !ok {
			p.forward.RefuseHubIdentity(w, r, name, r.URL.EscapedPath(), id, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				fmt.Sprintf("the path %q is not under clusters/%s/proxy", r.URL.Path, name))
			return
		}
		if verb := hubidentity.RequestVerb(r); verb != hubidentity.Verb(r.Method) {
			if code, reason, message := p.refusal(r, u, verb, name); code != 0 {
				p.forward.RefuseHubIdentity(w, r, name, path, id, code, reason, message)
				return
			}
		}
		p.forward.ServeHubIdentity(w, r, name, path, id)
	}), nil
}

// refusal asks the server's authorizer whether u may verb the proxy of cluster, and says how to answer when not
// (code 0 when it may).
func (p *proxyStorage) refusal(r *http.Request, u user.Info, verb, cluster string) (code int, reason metav1.StatusReason, message string) {
	if p.authorizer == nil { // a server built without delegated authorization decides nothing
		return http.StatusForbidden, metav1.StatusReasonForbidden, "this server has no authorizer for streams"
	}
	decision, why, err := p.authorizer.Authorize(r.Context(), authorizer.AttributesRecord{
		User: u, Verb: verb, APIGroup: gatewayv1alpha1.GroupVersion.Group, APIVersion: gatewayv1alpha1.GroupVersion.Version,
		Resource: gatewayv1alpha1.Resource, Subresource: gatewayv1alpha1.ProxySubresource, Name: cluster, ResourceRequest: true,
	})
	switch {
	case err != nil:
		return http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "cannot authorize the request with the hub; try again later"
	case decision != authorizer.DecisionAllow:
		return http.StatusForbidden, metav1.StatusReasonForbidden,
			hubidentity.Denied(u.GetName(), verb, cluster, why) + " (a stream into a cluster: exec, attach, port-forward)"
	}
	return 0, "", ""
}

// ProxyPath is what follows /clusters/<name>/proxy in an escaped request path, "/" when nothing does; ok is false
// when the path has no such segment.
func ProxyPath(escaped, name string) (string, bool) {
	marker := "/" + gatewayv1alpha1.Resource + "/" + name + "/" + gatewayv1alpha1.ProxySubresource
	i := strings.Index(escaped, marker)
	if i < 0 {
		return "", false
	}
	rest := escaped[i+len(marker):]
	switch {
	case rest == "":
		return "/", true
	case rest[0] != '/':
		return "", false // clusters/<name>/proxyfoo
	}
	return rest, true
}
