package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

// The front-proxy authenticator answers as k8s.io/apiserver's request-header authenticator does, in every case, and
// verifies a certificate's chain only once per CA bundle and validity period.
func TestFrontProxyVerifiesEachCertificateOnceAndAnswersAsTheRequestHeaderAuthenticator(t *testing.T) {
	g := NewWithT(t)
	now := time.Now()
	caA := must(certs.NewCA("front-proxy-ca-a", time.Hour, now))
	caB := must(certs.NewCA("front-proxy-ca-b", time.Hour, now))
	client := func(ca *certs.KeyPair, cn string) *x509.Certificate {
		kp := must(certs.IssueLeaf(ca, certs.LeafSpec{CommonName: cn, Usages: []certs.Usage{certs.UsageClientAuth}, Duration: time.Hour}, now))
		return kp.Cert
	}
	proxyA, proxyB, other := client(caA, "front-proxy-client"), client(caB, "front-proxy-client"), client(caA, "someone-else")
	bundle := func(cas ...*certs.KeyPair) dynamiccertificates.CAContentProvider {
		var pem []byte
		for _, ca := range cas {
			pem = append(pem, ca.CertPEM...)
		}
		return must(dynamiccertificates.NewStaticCAContent("front-proxy", pem))
	}
	allowed := &names{"front-proxy-client"}
	config := &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
		CAContentProvider:   bundle(caA),
		AllowedClientNames:  allowed,
	}
	// The authenticator k8s.io/apiserver builds from the same configuration.
	reference := headerrequest.NewDynamicVerifyOptionsSecure(func() (x509.VerifyOptions, bool) { return config.CAContentProvider.VerifyOptions() },
		config.AllowedClientNames, config.UsernameHeaders, config.UIDHeaders, config.GroupHeaders, config.ExtraHeaderPrefixes)
	f := newFrontProxy(config)
	verifications := 0
	f.verify = func(c *x509.Certificate, o x509.VerifyOptions) ([][]*x509.Certificate, error) {
		verifications++
		return c.Verify(o)
	}
	clock := now
	f.now = func() time.Time { return clock }
	withCache := f.in(reference)

	request := func(peer *x509.Certificate, user string) *http.Request {
		r := must(http.NewRequest(http.MethodGet, "https://gateway/apis", nil))
		if peer != nil {
			r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{peer}}
		}
		if user != "" {
			r.Header.Set("X-Remote-User", user)
			r.Header.Add("X-Remote-Group", "team")
			r.Header.Set("X-Remote-Extra-Scopes", "view")
		}
		return r
	}
	// same sends the request to both and expects the same answer; it returns the user, "" when refused.
	same := func(peer *x509.Certificate, user string) string {
		t.Helper()
		want, wantOK, wantErr := reference.AuthenticateRequest(request(peer, user))
		got, gotOK, gotErr := withCache.AuthenticateRequest(request(peer, user))
		g.Expect(gotOK).To(Equal(wantOK), "authenticated")
		g.Expect(gotErr != nil).To(Equal(wantErr != nil), "an error: got %v, want %v", gotErr, wantErr)
		if !wantOK {
			return ""
		}
		g.Expect(got.User.GetName()).To(Equal(want.User.GetName()))
		g.Expect(got.User.GetGroups()).To(ContainElements(append(want.User.GetGroups(), "system:authenticated")))
		g.Expect(got.User.GetExtra()).To(Equal(want.User.GetExtra()))
		return got.User.GetName()
	}

	g.Expect(same(proxyA, "alice")).To(Equal("alice"))
	g.Expect(verifications).To(Equal(1))
	for range 5 {
		g.Expect(same(proxyA, "bob")).To(Equal("bob"))
	}
	g.Expect(verifications).To(Equal(1), "a certificate verified once is remembered")

	// Refused as before: another CA, a name not allowed, no certificate; no user header is not authenticated.
	g.Expect(same(proxyB, "alice")).To(BeEmpty())
	g.Expect(same(other, "alice")).To(BeEmpty())
	g.Expect(same(nil, "alice")).To(BeEmpty())
	g.Expect(same(proxyA, "")).To(BeEmpty())

	// A new bundle: the remembered certificate is verified again, against it.
	config.CAContentProvider = bundle(caB)
	before := verifications
	g.Expect(same(proxyA, "alice")).To(BeEmpty(), "the old CA is gone")
	g.Expect(verifications).To(Equal(before + 1))
	g.Expect(same(proxyB, "alice")).To(Equal("alice"))
	g.Expect(same(proxyB, "alice")).To(Equal("alice"))
	g.Expect(verifications).To(Equal(before + 2))

	// The allowed names change: checked on every request, remembered or not.
	*allowed = names{"another-front-proxy"}
	g.Expect(same(proxyB, "alice")).To(BeEmpty())
	*allowed = names{"front-proxy-client"}
	g.Expect(same(proxyB, "alice")).To(Equal("alice"))

	// Past the certificate's (and its CA's) validity, it is verified again, and refused.
	clock = now.Add(2 * time.Hour)
	before = verifications
	_, ok, _ := f.AuthenticateRequest(request(proxyB, "alice"))
	g.Expect(ok).To(BeFalse())
	g.Expect(verifications).To(Equal(before + 1))
}

// The options' authenticator is kept as it is when there is no request-header configuration.
// Without the hub's front-proxy configuration nothing can vouch for a request: every one is refused, a bearer token
// and front-proxy headers alike, and the error says what is missing.
func TestWithoutRequestHeaderConfigurationEveryRequestIsRefused(t *testing.T) {
	g := NewWithT(t)
	auth := frontProxyOnly(nil)
	for _, h := range []http.Header{
		{"Authorization": {"Bearer a-hub-token"}},
		{"X-Remote-User": {"system:admin"}, "X-Remote-Group": {"system:masters"}},
		{},
	} {
		req := httptest.NewRequest(http.MethodGet, "https://gateway/apis", nil)
		req.Header = h
		resp, ok, err := auth.AuthenticateRequest(req)
		g.Expect(ok).To(BeFalse(), "%v", h)
		g.Expect(resp).To(BeNil())
		g.Expect(err).To(MatchError(errNoFrontProxy))
	}
}

// names are allowed names that change, as those of extension-apiserver-authentication do.
type names []string

func (n *names) Value() []string { return *n }
