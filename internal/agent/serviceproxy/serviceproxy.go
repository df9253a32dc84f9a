// Package serviceproxy is the proxy-agent's service-proxy. It serves the plain HTTP/1.1 requests the hub's
// user-server sends through the tunnel: kube-apiserver requests, after authenticating the caller's bearer token on the
// managed cluster or on the hub (hub identities are impersonated), and requests to allow-listed services, which pass
// through unauthenticated so the service decides.
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
	"k8s.io/client-go/rest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/copybuf"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
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
	// Hub is the add-on's hub identity, used for hub TokenReviews; nil means hub tokens are not accepted.
	Hub *rest.Config
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
	p := &proxy{kubeURL: kubeURL, allowed: opts.Allowed, domain: domain, dial: dial, buffers: buffers}
	managed, err := newReviewer("managed cluster", opts.Kube, ttl, now)
	if err != nil {
		return nil, err
	}
	p.chain = []authenticator{{name: "the managed cluster", authenticate: managed.review}}
	if opts.Hub != nil {
		hub, err := newReviewer("hub", opts.Hub, ttl, now)
		if err != nil {
			return nil, err
		}
		p.chain = append(p.chain, authenticator{name: "the hub", authenticate: hub.review, mapUser: managedUserName})
	}
	if opts.OIDC != nil {
		oidc, err := newOIDCAuthenticator(*opts.OIDC, dial, now)
		if err != nil {
			return nil, err
		}
		p.chain = append(p.chain, authenticator{name: "the OIDC issuer", authenticate: oidc.authenticate,
			mapUser: func(user string) string { return user }})
	}
	if len(p.chain) > 1 { // hub or OIDC identities are impersonated with the agent's credential
		if p.agentToken, err = newAgentToken(opts.Kube); err != nil {
			return nil, err
		}
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

// proxy is the handler New returns.
type proxy struct {
	kubeURL    *url.URL
	allowed    allowlist.List
	domain     string
	chain      []authenticator // the managed cluster, then the hub and the OIDC issuer when configured
	agentToken *agentToken     // the credential of impersonated requests; nil without hub or OIDC tokens
	kube       *httputil.ReverseProxy
	services   *httputil.ReverseProxy
	dial       dialFunc      // service tunnels' connections
	buffers    *copybuf.Pool // shared by both reverse proxies and the service tunnels
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if hasHeaderPrefix(r.Header, proxyhttp.HeaderPrefix) {
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

// serveKube authenticates the caller's token and forwards to the kube-apiserver: a managed-cluster token as it came,
// a hub or OIDC token as impersonation of the identity it maps to, with the agent's own credential.
func (p *proxy) serveKube(w http.ResponseWriter, r *http.Request) {
	token := proxyhttp.BearerToken(r.Header)
	if token == "" {
		proxyhttp.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized: a bearer token is required")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tokenReviewTimeout)
	defer cancel()

	for _, a := range p.chain {
		id, err := a.authenticate(ctx, token)
		if err != nil {
			logger.Error(err, "Cannot authenticate a request", "path", r.URL.Path, "with", a.name)
			proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
				fmt.Sprintf("cannot authenticate the request with %s; try again later", a.name))
			return
		}
		if !id.authenticated {
			continue // only a rejection falls through to the next authenticator
		}
		if a.mapUser == nil {
			p.kube.ServeHTTP(w, r.WithContext(withRoute(r.Context(), &route{target: p.kubeURL})))
			return
		}
		p.impersonate(w, r, a.mapUser(id.user), impersonatedGroups(id.groups))
		return
	}
	proxyhttp.WriteStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
}

// authenticator is one link of the chain a bearer token goes through, in order: the managed cluster's TokenReview,
// the hub's, then an OIDC issuer.
type authenticator struct {
	name         string // for the 503 answer and the log: "the managed cluster", "the hub", "the OIDC issuer"
	authenticate func(ctx context.Context, token string) (identity, error)
	// mapUser is the user an authenticated identity is impersonated as; nil forwards the caller's own token.
	mapUser func(user string) string
}

// impersonate forwards the request as user and groups, with the agent's own credential.
func (p *proxy) impersonate(w http.ResponseWriter, r *http.Request, user string, groups []string) {
	credential, err := p.agentToken.get()
	if err != nil {
		logger.Error(err, "Cannot read the agent's token for an impersonated request")
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"the proxy-agent has no credential for the managed cluster; try again later")
		return
	}
	rt := &route{target: p.kubeURL, impersonate: &impersonation{user: user, groups: groups, authorization: "Bearer " + credential}}
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
			removeHeaderPrefix(pr.Out.Header, proxyhttp.HeaderPrefix)
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
