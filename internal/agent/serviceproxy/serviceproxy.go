// Package serviceproxy is the proxy-agent's service-proxy. It serves the HTTP/1.1 requests the hub sends through the
// tunnel: kube-apiserver requests, and requests to allow-listed services, which pass through unauthenticated so the
// service decides. A kube-apiserver request is made in one of two ways:
//   - from the hub's impersonator (a TLS client certificate of the signer's CA with contract.ImpersonatorCommonName
//     and contract.ImpersonatorRoleURI,
//     verified where the connection is accepted), as the identity its Impersonate-* headers name, with the agent's own
//     credential: this is how hub users arrive, and their hub credential never does;
//     A hub user that asks to act as someone else (Impersonate-* on the user-server, passed on as
//     Requested-Impersonate-*) acts as them when this cluster's RBAC lets the hub user impersonate them;
//   - from anyone else, with a bearer token this cluster authenticates (passed through as it came, Impersonate-*
//     included: the kube-apiserver decides them) or an ID token of the configured OIDC issuer (impersonated; then
//     Impersonate-* are refused).
package serviceproxy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authzv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/copybuf"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
)

const (
	defaultServiceDomain = "svc"
	defaultTokenCacheTTL = 10 * time.Second
	// tokenReviewTimeout bounds one TokenReview, so a slow apiserver turns into a 503 instead of a hung request.
	tokenReviewTimeout = 10 * time.Second
)

// Options configures the service-proxy.
type Options struct {
	// Kube is the managed cluster's kube-apiserver (Host, CA, BearerToken or BearerTokenFile = the agent's
	// ServiceAccount). Its CA verifies the apiserver; its token is the credential of impersonated requests and of the
	// managed-cluster TokenReviews.
	Kube *rest.Config
	// RefuseHubIdentities refuses the impersonator's requests (proxy-agent --enable-impersonation=false): hub users
	// then reach the cluster only with tokens of its own.
	RefuseHubIdentities bool
	// Allowed lists the services that may be reached; the kube-apiserver is not subject to it.
	Allowed allowlist.List
	// DialContext makes the outbound connections; nil means a net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// ServiceDomain is the suffix of service host names, <name>.<namespace>.<ServiceDomain>; default "svc".
	ServiceDomain string
	// TokenCacheTTL is how long TokenReview results are kept; 0 means 10s, negative disables the cache.
	TokenCacheTTL time.Duration
	// ServiceCAFile is a PEM file of CAs trusted for https services in addition to the system roots (the
	// proxy-agent's --service-ca-file, a ConfigMap volume). It is read again when it changes; it may be absent, and a
	// file without a PEM certificate is logged and ignored. "" trusts the system roots only. The kube-apiserver is
	// verified against Kube's CA either way.
	ServiceCAFile string
	// ServiceCACheckInterval is how often, at most, ServiceCAFile is read again; 0 means 5s.
	ServiceCACheckInterval time.Duration
	// OIDC, when set, accepts the ID tokens of an OpenID Connect issuer that neither cluster authenticates, and
	// impersonates the user and groups they map to.
	OIDC *OIDC

	// systemRoots replaces x509.SystemCertPool in tests.
	systemRoots func() (*x509.CertPool, error)
	// now replaces time.Now in tests: it decides when cached TokenReviews expire.
	now func() time.Time
}

// New returns the service-proxy handler.
func New(opts Options) (http.Handler, error) {
	if opts.Kube == nil || opts.Kube.Host == "" {
		return nil, errors.New("serviceproxy: the managed cluster's kube-apiserver (Options.Kube with a Host) is required")
	}
	kubeURL, _, err := rest.DefaultServerUrlFor(opts.Kube)
	if err != nil {
		return nil, fmt.Errorf("serviceproxy: kube-apiserver address: %w", err)
	}
	domain := opts.ServiceDomain
	if domain == "" {
		domain = defaultServiceDomain
	}
	domain = strings.Trim(domain, ".")
	ttl := opts.TokenCacheTTL
	if ttl == 0 {
		ttl = defaultTokenCacheTTL
	}
	dial := opts.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}

	now := opts.now
	if now == nil {
		now = time.Now
	}

	buffers := &copybuf.Pool{}
	p := &proxy{kubeURL: kubeURL, allowed: opts.Allowed, domain: domain, dial: dial, buffers: buffers,
		hubIdentities: !opts.RefuseHubIdentities}
	managed, err := review.NewTokens("managed cluster", managedReviewConfig(opts.Kube, dial), review.TokensOptions{TTL: ttl, Now: now})
	if err != nil {
		return nil, err
	}
	authz, err := authzv1client.NewForConfig(managedReviewConfig(opts.Kube, dial))
	if err != nil {
		return nil, fmt.Errorf("serviceproxy: SubjectAccessReview client: %w", err)
	}
	p.sar, p.impersonations = authz.SubjectAccessReviews(), review.NewCache[bool](ttl, now)
	p.chain = []authenticator{{name: "the managed cluster", authenticate: managed.Review}}
	if opts.OIDC != nil {
		oidc, err := newOIDCAuthenticator(*opts.OIDC, dial, now)
		if err != nil {
			return nil, err
		}
		p.chain = append(p.chain, authenticator{name: "the OIDC issuer", authenticate: oidc.authenticate, impersonate: true})
	}
	// Hub and OIDC identities are impersonated with the agent's credential.
	if p.agentToken, err = newAgentToken(opts.Kube); err != nil {
		return nil, err
	}
	kubeTransport, err := newKubeTransport(opts.Kube, dial)
	if err != nil {
		return nil, err
	}
	p.kube = newReverseProxy("kube-apiserver", kubeTransport, buffers)
	var serviceTransport http.RoundTripper = newServiceTransport(dial, nil)
	if opts.ServiceCAFile != "" {
		serviceTransport = newServiceCATransport(opts.ServiceCAFile, opts.ServiceCACheckInterval, systemRoots(opts.systemRoots),
			func(roots *x509.CertPool) *http.Transport { return newServiceTransport(dial, roots) })
	}
	p.services = newReverseProxy("service", serviceTransport, buffers)
	return p, nil
}

// managedReviewConfig is cfg as the managed cluster's TokenReviews use it.
func managedReviewConfig(cfg *rest.Config, dial dialFunc) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "cluster-proxy-service-proxy"
	}
	// The reviews reach the kube-apiserver the way the requests do (the agent's --resolve overrides included).
	cfg.Dial = dial
	return cfg
}

// proxy is the handler New returns.
type proxy struct {
	kubeURL        *url.URL
	allowed        allowlist.List
	domain         string
	hubIdentities  bool                                       // the impersonator's requests are served
	chain          []authenticator                            // the managed cluster, then the OIDC issuer when configured
	sar            authzv1client.SubjectAccessReviewInterface // whether a hub user may impersonate what it asks (requested.go)
	impersonations *review.Cache[bool]                        // its answers, by review.AccessKey
	agentToken     *agentToken                                // the credential of impersonated requests
	kube           *httputil.ReverseProxy
	services       *httputil.ReverseProxy
	dial           dialFunc      // service tunnels' connections
	buffers        *copybuf.Pool // shared by both reverse proxies and the service tunnels
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if proxyhttp.HasHeaderPrefix(r.Header, proxyhttp.HeaderPrefix) {
		if r.Method == http.MethodConnect {
			p.serveServiceTunnel(w, r)
			return
		}
		p.serveService(w, r)
		return
	}
	p.serveKube(w, r)
}

// serveService forwards to an allow-listed service with the caller's headers, Authorization included.
func (p *proxy) serveService(w http.ResponseWriter, r *http.Request) {
	t, ok := p.allowedService(w, r)
	if !ok {
		return
	}
	p.services.ServeHTTP(w, r.WithContext(withRoute(r.Context(), &route{target: t.url(p.domain)})))
}

// allowedService reads the service a request addresses. A malformed one is answered 400, one the allow-list does not
// name 403; ok is false then.
func (p *proxy) allowedService(w http.ResponseWriter, r *http.Request) (t serviceTarget, ok bool) {
	t, err := parseServiceTarget(r.Header)
	if err != nil {
		proxyhttp.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
		return t, false
	}
	if !p.allowed.Allows(t.namespace, t.name, t.port) {
		proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("service %s/%s port %d is not in the allow-list of this cluster", t.namespace, t.name, t.port))
		return t, false
	}
	return t, true
}

// serveKube forwards to the kube-apiserver: the impersonator's request as the identity it names, a managed-cluster
// token as it came, an OIDC token as impersonation of the identity it maps to; the last two with the agent's own
// credential.
func (p *proxy) serveKube(w http.ResponseWriter, r *http.Request) {
	if fromImpersonator(r) {
		p.serveHubIdentity(w, r)
		return
	}
	// Only the impersonator asks on a hub user's behalf.
	proxyhttp.RemoveHeaderPrefix(r.Header, proxyhttp.RequestedImpersonatePrefix)
	token := proxyhttp.BearerToken(r.Header)
	// Impersonate-* with a token of this cluster go on with it, and the kube-apiserver decides them for the token's
	// identity; without a token they would be the word of whoever sent them.
	asks := proxyhttp.HasHeaderPrefix(r.Header, impersonateHeaderPrefix)
	if asks && token == "" {
		proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			"Impersonate-* headers are accepted only from the hub's impersonator certificate, or with a token of this cluster")
		return
	}
	if token == "" {
		proxyhttp.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized: a bearer token is required")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tokenReviewTimeout)
	defer cancel()

	for _, a := range p.chain {
		id, err := a.authenticate(ctx, token)
		if errors.Is(err, review.ErrBusy) {
			tooManyReviews(w, a.name)
			return
		}
		if err != nil {
			logger.Error(err, "Cannot authenticate a request", "path", r.URL.Path, "with", a.name)
			proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("cannot authenticate the request with %s; try again later", a.name))
			return
		}
		if !id.Authenticated {
			continue // only a rejection falls through to the next authenticator
		}
		if !a.impersonate {
			p.kube.ServeHTTP(w, r.WithContext(withRoute(r.Context(), &route{target: p.kubeURL})))
			return
		}
		if asks {
			// The agent's credential would make the request: the caller's Impersonate-* would be the agent's.
			proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
				fmt.Sprintf("Impersonate-* headers are not served with a token of %s; use a token of this cluster", a.name))
			return
		}
		h := http.Header{}
		h.Set(impersonateUserHeader, id.User)
		for _, g := range impersonatedGroups(id.Groups) {
			h.Add(impersonateGroupHeader, g)
		}
		p.impersonate(w, r, h)
		return
	}
	proxyhttp.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
}

// tooManyReviews answers a request whose token could not be reviewed because too many reviews are in flight: 429
// with Retry-After, which client-go waits out and sends again.
func tooManyReviews(w http.ResponseWriter, with string) {
	w.Header().Set("Retry-After", "1")
	proxyhttp.WriteStatus(w, http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests,
		fmt.Sprintf("too many tokens are being reviewed with %s; try again in a moment", with))
}

// serveHubIdentity forwards the impersonator's request as the identity its Impersonate-* headers name: the hub has
// authenticated and authorized the user and mapped the name, so they go as they came.
func (p *proxy) serveHubIdentity(w http.ResponseWriter, r *http.Request) {
	if !p.hubIdentities {
		proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden,
			"this cluster's proxy-agent does not accept hub identities (--enable-impersonation=false); use a token of the cluster")
		return
	}
	h := http.Header{}
	for k, v := range r.Header {
		if proxyhttp.HasPrefixFold(k, impersonateHeaderPrefix) {
			h[k] = v
		}
	}
	if h.Get(impersonateUserHeader) == "" {
		proxyhttp.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest,
			"a request of the hub's impersonator must name the user in Impersonate-User")
		return
	}
	want, asked, err := identityFrom(r.Header, proxyhttp.RequestedImpersonatePrefix)
	if err != nil {
		proxyhttp.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, "impersonation: "+err.Error())
		return
	}
	proxyhttp.RemoveHeaderPrefix(r.Header, proxyhttp.RequestedImpersonatePrefix)
	if asked {
		as, _, err := identityFrom(h, impersonateHeaderPrefix)
		if err != nil {
			proxyhttp.WriteStatus(w, http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error())
			return
		}
		p.serveRequestedImpersonation(w, r, as, want)
		return
	}
	p.impersonate(w, r, h)
}

// fromImpersonator reports whether the request came on a TLS connection whose client certificate, verified against
// the hub's CA bundle alone when the connection was accepted, is the hub's impersonator: its name and the role URI
// that only the operator's own impersonator certificate carries (contract.IsImpersonator).
func fromImpersonator(r *http.Request) bool {
	return contract.IsImpersonator(contract.VerifiedLeaf(r.TLS))
}

// authenticator is one link of the chain a bearer token goes through, in order: the managed cluster's TokenReview,
// then an OIDC issuer.
type authenticator struct {
	name         string // for the 503 answer and the log: "the managed cluster", "the OIDC issuer"
	authenticate func(ctx context.Context, token string) (review.Identity, error)
	// impersonate sends an authenticated identity as impersonation; false forwards the caller's own token.
	impersonate bool
}

// impersonate forwards the request as the identity in headers (Impersonate-*), with the agent's own credential.
func (p *proxy) impersonate(w http.ResponseWriter, r *http.Request, headers http.Header) {
	credential, err := p.agentToken.get()
	if err != nil {
		logger.Error(err, "Cannot read the agent's token for an impersonated request")
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"the proxy-agent has no credential for the managed cluster; try again later")
		return
	}
	rt := &route{target: p.kubeURL, impersonate: &impersonation{headers: headers, authorization: "Bearer " + credential}}
	p.kube.ServeHTTP(w, r.WithContext(withRoute(r.Context(), rt)))
}

// route is what the handler decided for one request; the reverse proxies' Rewrite applies it.
type route struct {
	target      *url.URL
	impersonate *impersonation // nil: the caller's headers go as they came
}

type routeKey struct{}

func withRoute(ctx context.Context, r *route) context.Context {
	return context.WithValue(ctx, routeKey{}, r)
}

func newReverseProxy(kind string, transport http.RoundTripper, buffers httputil.BufferPool) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rt := pr.In.Context().Value(routeKey{}).(*route)
			pr.SetURL(rt.target)
			proxyhttp.RemoveHeaderPrefix(pr.Out.Header, proxyhttp.HeaderPrefix)
			if rt.impersonate != nil {
				rt.impersonate.apply(pr.Out.Header)
			}
		},
		Transport: transport,
		// Watches and logs (no Content-Length) and event streams are flushed on every write, their headers at once:
		// ReverseProxy does that by itself. Other answers are written as they are copied, headers with the first
		// bytes, so they cross the tunnel in one packet rather than headers first from a goroutine of their own.
		FlushInterval: 0,
		BufferPool:    buffers,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the caller went away; nobody reads the answer
			}
			logger.Error(err, "Proxy request failed",
				"target", kind, "host", r.Context().Value(routeKey{}).(*route).target.Host, "path", r.URL.Path)
			proxyhttp.WriteStatus(w, http.StatusBadGateway, metav1.StatusReasonInternalError,
				fmt.Sprintf("the service-proxy cannot reach the %s: %v", kind, err))
		},
		ErrorLog: newStdLogger(),
	}
}
