package gateway

import (
	"crypto/x509"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	authngroup "k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/request/union"
)

// maxVerifiedProxies bounds the certificates remembered as verified. The hub has one front-proxy client certificate
// (two while it is renewed); more means something else presents certificates, and the memory starts over.
const maxVerifiedProxies = 16

// frontProxy authenticates the hub kube-apiserver's requests as k8s.io/apiserver's request-header authenticator does,
// from the same configuration (the front-proxy CA and allowed names of extension-apiserver-authentication, the
// X-Remote-* headers), but verifies a certificate's chain once rather than on every request: that verification (an
// ECDSA or RSA signature check) was a fifth of the server's CPU per proxied request. A certificate counts as verified
// while it and its chain are within their validity periods and the CA bundle is the one it was verified against; its
// common name is checked on every request, as the allowed names may change. A request it does not authenticate (no
// certificate, a name not allowed, a chain that does not verify, no user header) goes on to the authenticator the
// options built, which answers it as before and says why it refuses.
type frontProxy struct {
	config  *authenticatorfactory.RequestHeaderConfig
	headers authenticator.Request
	now     func() time.Time
	// verify is x509.Certificate.Verify; tests count its calls.
	verify func(*x509.Certificate, x509.VerifyOptions) ([][]*x509.Certificate, error)

	mu       sync.RWMutex
	verified map[string]verifiedProxy // by the DER of the leaf certificate
}

type verifiedProxy struct {
	roots    *x509.CertPool // the bundle it was verified against
	notAfter time.Time
}

// errNoFrontProxy answers every request when the hub publishes no front-proxy configuration.
var errNoFrontProxy = errors.New("the hub publishes no front-proxy configuration (requestheader-client-ca-file in " +
	"kube-system/extension-apiserver-authentication): only the hub kube-apiserver may call this server")

// frontProxyOnly authenticates the hub kube-apiserver's front proxy (request-header, verified as k8s.io/apiserver
// verifies it) and nothing else: no TokenReview of a bearer token, no client certificate of the hub's client CA, no
// anonymous user. A request that comes straight to the gateway's port, past the hub's audit log and flow control, is
// answered 401.
func frontProxyOnly(config *authenticatorfactory.RequestHeaderConfig) authenticator.Request {
	if config == nil {
		return authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return nil, false, errNoFrontProxy
		})
	}
	// What the cache does not answer goes to k8s.io/apiserver's own request-header authenticator, which says why.
	return newFrontProxy(config).in(headerrequest.NewDynamicVerifyOptionsSecure(config.CAContentProvider.VerifyOptions,
		config.AllowedClientNames, config.UsernameHeaders, config.UIDHeaders, config.GroupHeaders, config.ExtraHeaderPrefixes))
}

func newFrontProxy(config *authenticatorfactory.RequestHeaderConfig) *frontProxy {
	return &frontProxy{
		config:   config,
		headers:  headerrequest.NewDynamic(config.UsernameHeaders, config.UIDHeaders, config.GroupHeaders, config.ExtraHeaderPrefixes),
		now:      time.Now,
		verify:   (*x509.Certificate).Verify,
		verified: map[string]verifiedProxy{},
	}
}

// in is the authenticator the server uses: f first, then next, both adding system:authenticated.
func (f *frontProxy) in(next authenticator.Request) authenticator.Request {
	return authngroup.NewAuthenticatedGroupAdder(union.New(f, next))
}

// AuthenticateRequest answers requests from a remembered front proxy; anything else is left to next (it returns
// false without an error), which the union then asks.
func (f *frontProxy) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) != 1 {
		return nil, false, nil
	}
	leaf := req.TLS.PeerCertificates[0]
	opts, ok := f.config.CAContentProvider.VerifyOptions()
	if !ok || !f.allowed(leaf.Subject.CommonName) {
		return nil, false, nil
	}
	if !f.remembers(leaf, opts.Roots) {
		opts.CurrentTime = f.now()
		chains, err := f.verify(leaf, opts)
		if err != nil {
			return nil, false, nil // next verifies it again and says why
		}
		f.remember(leaf, opts.Roots, chains)
	}
	return f.headers.AuthenticateRequest(req)
}

func (f *frontProxy) allowed(commonName string) bool {
	names := f.config.AllowedClientNames.Value()
	return len(names) == 0 || slices.Contains(names, commonName)
}

func (f *frontProxy) remembers(leaf *x509.Certificate, roots *x509.CertPool) bool {
	f.mu.RLock()
	v, ok := f.verified[string(leaf.Raw)]
	f.mu.RUnlock()
	now := f.now()
	return ok && v.roots == roots && !now.Before(leaf.NotBefore) && now.Before(v.notAfter)
}

// remember keeps leaf as verified until the first certificate of its chains expires.
func (f *frontProxy) remember(leaf *x509.Certificate, roots *x509.CertPool, chains [][]*x509.Certificate) {
	notAfter := leaf.NotAfter
	for _, chain := range chains {
		for _, c := range chain {
			if c.NotAfter.Before(notAfter) {
				notAfter = c.NotAfter
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.verified) >= maxVerifiedProxies {
		clear(f.verified)
	}
	f.verified[string(leaf.Raw)] = verifiedProxy{roots: roots, notAfter: notAfter}
}
