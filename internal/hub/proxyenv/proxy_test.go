package proxyenv

import (
	"bytes"
	"encoding/pem"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestFromConfig(t *testing.T) {
	caPEM, caDER := selfSigned(t, "proxy-ca")
	otherPEM, otherDER := selfSigned(t, "other-ca")
	keyPEM := privateKeyPEM(t)
	withComments := []byte("# Issuer: proxy-ca\n" + string(caPEM) + "\n# again\n" + string(caPEM) + string(otherPEM))
	truncated := caPEM[:len(caPEM)-30]

	const (
		fHTTP  = "spec.proxyConfig.httpProxy"
		fHTTPS = "spec.proxyConfig.httpsProxy"
		fCA    = "spec.proxyConfig.caBundle"
	)
	cases := []struct {
		name   string
		in     addonv1alpha1.ProxyConfig
		want   Settings
		caDERs [][]byte // when set, compared instead of want.CABundle
		field  string
		reason string
		// msgHas / msgHasNot are checked on the error message when an error is expected.
		msgHas, msgHasNot []string
	}{
		{name: "empty", in: addonv1alpha1.ProxyConfig{}, want: Settings{}},
		{name: "http only",
			in:   addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy.example.com:3128"},
			want: Settings{HTTPProxy: "http://proxy.example.com:3128"}},
		{name: "https only, trailing slash, surrounding spaces trimmed",
			in:   addonv1alpha1.ProxyConfig{HTTPSProxy: "  https://proxy.example.com/ \n"},
			want: Settings{HTTPSProxy: "https://proxy.example.com/"}},
		{name: "both, no port, upper-case scheme",
			in:   addonv1alpha1.ProxyConfig{HTTPProxy: "HTTP://10.0.0.1", HTTPSProxy: "http://proxy:3128"},
			want: Settings{HTTPProxy: "HTTP://10.0.0.1", HTTPSProxy: "http://proxy:3128"}},
		{name: "credentials are kept in settings",
			in:   addonv1alpha1.ProxyConfig{HTTPSProxy: "http://user:s3cr%40t@proxy:3128"},
			want: Settings{HTTPSProxy: "http://user:s3cr%40t@proxy:3128"}},
		{name: "noProxy with spaces, empties and duplicates",
			in:   addonv1alpha1.ProxyConfig{HTTPProxy: "http://p:1", NoProxy: " a.example.com, ,10.0.0.0/8,,  .corp ,A.example.com, "},
			want: Settings{HTTPProxy: "http://p:1", NoProxy: "a.example.com,10.0.0.0/8,.corp"}},
		{name: "noProxy of only separators",
			in:   addonv1alpha1.ProxyConfig{HTTPProxy: "http://p:1", NoProxy: " , ,"},
			want: Settings{HTTPProxy: "http://p:1"}},
		{name: "caBundle good",
			in:     addonv1alpha1.ProxyConfig{HTTPSProxy: "https://p:443", CABundle: caPEM},
			want:   Settings{HTTPSProxy: "https://p:443"},
			caDERs: [][]byte{caDER}},
		{name: "caBundle with comments and duplicates is normalized",
			in:     addonv1alpha1.ProxyConfig{HTTPSProxy: "https://p:443", CABundle: withComments},
			want:   Settings{HTTPSProxy: "https://p:443"},
			caDERs: [][]byte{caDER, otherDER}},
		{name: "caBundle only whitespace is unset",
			in:   addonv1alpha1.ProxyConfig{HTTPSProxy: "https://p", CABundle: []byte(" \n")},
			want: Settings{HTTPSProxy: "https://p"}},

		{name: "caBundle not PEM", in: addonv1alpha1.ProxyConfig{CABundle: []byte("not a certificate")},
			field: fCA, reason: proxyv1alpha1.ReasonInvalidProxyCABundle, msgHas: []string{"not PEM"}},
		{name: "caBundle DER instead of PEM", in: addonv1alpha1.ProxyConfig{CABundle: caDER},
			field: fCA, reason: proxyv1alpha1.ReasonInvalidProxyCABundle},
		{name: "caBundle with a private key block",
			in:    addonv1alpha1.ProxyConfig{CABundle: append(append([]byte{}, caPEM...), keyPEM...)},
			field: fCA, reason: proxyv1alpha1.ReasonInvalidProxyCABundle,
			msgHas: []string{"block 2", "private key"}, msgHasNot: []string{string(keyPEM[28:60])}},
		{name: "caBundle with only a private key",
			in:    addonv1alpha1.ProxyConfig{CABundle: keyPEM},
			field: fCA, reason: proxyv1alpha1.ReasonInvalidProxyCABundle,
			msgHas: []string{"private key"}},
		{name: "caBundle with a certificate request",
			in:    addonv1alpha1.ProxyConfig{CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{1}})},
			field: fCA, reason: proxyv1alpha1.ReasonInvalidProxyCABundle,
			msgHas: []string{`"CERTIFICATE REQUEST"`}},
		{name: "caBundle with a CERTIFICATE block that does not parse",
			in:    addonv1alpha1.ProxyConfig{CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})},
			field: fCA, reason: proxyv1alpha1.ReasonInvalidProxyCABundle},
		{name: "caBundle with a truncated block after a good one",
			in:    addonv1alpha1.ProxyConfig{CABundle: append(append([]byte{}, otherPEM...), truncated...)},
			field: fCA, reason: proxyv1alpha1.ReasonInvalidProxyCABundle,
			msgHas: []string{"malformed"}},

		{name: "URL without scheme", in: addonv1alpha1.ProxyConfig{HTTPSProxy: "proxy:3128"},
			field: fHTTPS, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{`"proxy:3128"`, "http://"}},
		{name: "host only", in: addonv1alpha1.ProxyConfig{HTTPProxy: "proxy.example.com"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL},
		{name: "scheme ftp", in: addonv1alpha1.ProxyConfig{HTTPProxy: "ftp://proxy:21"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{`"ftp"`}},
		{name: "scheme socks5", in: addonv1alpha1.ProxyConfig{HTTPSProxy: "socks5://proxy:1080"},
			field: fHTTPS, reason: proxyv1alpha1.ReasonInvalidProxyURL},
		{name: "missing host", in: addonv1alpha1.ProxyConfig{HTTPSProxy: "https://"},
			field: fHTTPS, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{"no host"}},
		{name: "missing host with port", in: addonv1alpha1.ProxyConfig{HTTPSProxy: "http://:3128"},
			field: fHTTPS, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{"no host"}},
		{name: "with path", in: addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy:3128/path"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{"path"}},
		{name: "with query", in: addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy:3128/?a=b"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{"query"}},
		{name: "with fragment", in: addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy:3128#x"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{"fragment"}},
		{name: "port out of range", in: addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy:70000"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL, msgHas: []string{"port"}},
		{name: "non-numeric port", in: addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy:abc"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL},
		{name: "inner whitespace", in: addonv1alpha1.ProxyConfig{HTTPProxy: "http://proxy :3128"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL},
		{name: "httpProxy is checked before httpsProxy",
			in:    addonv1alpha1.ProxyConfig{HTTPProxy: "ftp://a", HTTPSProxy: "ftp://b"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL},

		{name: "credentials masked: path error",
			in:    addonv1alpha1.ProxyConfig{HTTPSProxy: "http://alice:Hunter2pw@proxy:3128/x"},
			field: fHTTPS, reason: proxyv1alpha1.ReasonInvalidProxyURL,
			msgHas: []string{`"http://***@proxy:3128/x"`}, msgHasNot: []string{"Hunter2pw", "alice"}},
		{name: "credentials masked: parse error quoting the password",
			in:    addonv1alpha1.ProxyConfig{HTTPSProxy: "http://alice:Hun/ter2pw@proxy:3128"},
			field: fHTTPS, reason: proxyv1alpha1.ReasonInvalidProxyURL,
			msgHasNot: []string{"Hun", "ter2pw", "alice"}},
		{name: "credentials masked: no scheme",
			in:    addonv1alpha1.ProxyConfig{HTTPProxy: "alice:Hunter2pw@proxy:3128"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL,
			msgHas:    []string{`"***@proxy:3128"`},
			msgHasNot: []string{"Hunter2pw", "alice"}},
		{name: "credentials masked: unsupported scheme",
			in:    addonv1alpha1.ProxyConfig{HTTPProxy: "socks5://alice:Hunter2pw@proxy:1080"},
			field: fHTTP, reason: proxyv1alpha1.ReasonInvalidProxyURL,
			msgHasNot: []string{"Hunter2pw", "alice"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := FromConfig(tc.in)
			if tc.field != "" {
				fe := expectFieldError(g, err, tc.field, tc.reason)
				g.Expect(got).To(Equal(Settings{}))
				for _, s := range tc.msgHas {
					g.Expect(fe.Message).To(ContainSubstring(s))
				}
				for _, s := range tc.msgHasNot {
					g.Expect(fe.Error()).NotTo(ContainSubstring(s))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.caDERs != nil {
				g.Expect(certDERs(g, got.CABundle)).To(Equal(tc.caDERs))
				got.CABundle = nil
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestSettingsRedacted(t *testing.T) {
	g := NewWithT(t)
	s := Settings{HTTPProxy: "http://u:p@proxy:3128", HTTPSProxy: "https://proxy:443", NoProxy: "a"}
	g.Expect(s.Redacted()).To(Equal(Settings{HTTPProxy: "http://***@proxy:3128", HTTPSProxy: "https://proxy:443", NoProxy: "a"}))
	g.Expect(s.HTTPProxy).To(Equal("http://u:p@proxy:3128"), "receiver is not modified")
}

func TestDirectHostsIsFresh(t *testing.T) {
	g := NewWithT(t)
	a := DirectHosts()
	g.Expect(a).To(Equal([]string{"kubernetes.default.svc", "kubernetes.default.svc.cluster.local", ".svc", ".cluster.local", "localhost", "127.0.0.1"}))
	a[0] = "changed"
	g.Expect(DirectHosts()[0]).To(Equal("kubernetes.default.svc"))
}

func TestEnv(t *testing.T) {
	cases := []struct {
		name   string
		s      Settings
		direct []string
		want   []corev1.EnvVar
	}{
		{name: "nil when no proxy", s: Settings{NoProxy: "a.example.com"}, direct: DirectHosts(), want: nil},
		{name: "http+https with user noProxy and DirectHosts deduplicated",
			s: Settings{
				HTTPProxy:  "http://proxy:3128",
				HTTPSProxy: "https://proxy:3129",
				NoProxy:    "a.example.com,localhost,.SVC,10.0.0.0/8",
			},
			direct: DirectHosts(),
			want: []corev1.EnvVar{
				{Name: "HTTP_PROXY", Value: "http://proxy:3128"},
				{Name: "http_proxy", Value: "http://proxy:3128"},
				{Name: "HTTPS_PROXY", Value: "https://proxy:3129"},
				{Name: "https_proxy", Value: "https://proxy:3129"},
				{Name: "NO_PROXY", Value: "a.example.com,localhost,.SVC,10.0.0.0/8,kubernetes.default.svc,kubernetes.default.svc.cluster.local,.cluster.local,127.0.0.1"},
				{Name: "no_proxy", Value: "a.example.com,localhost,.SVC,10.0.0.0/8,kubernetes.default.svc,kubernetes.default.svc.cluster.local,.cluster.local,127.0.0.1"},
			}},
		{name: "https only, no noProxy, no alwaysDirect: NO_PROXY still present",
			s: Settings{HTTPSProxy: "https://proxy"},
			want: []corev1.EnvVar{
				{Name: "HTTPS_PROXY", Value: "https://proxy"},
				{Name: "https_proxy", Value: "https://proxy"},
				{Name: "NO_PROXY", Value: ""},
				{Name: "no_proxy", Value: ""},
			}},
		{name: "'$' from the ADC is escaped, alwaysDirect is passed as is",
			s:      Settings{HTTPProxy: "http://u:pa$$w$(X)@proxy", NoProxy: "a$b"},
			direct: []string{" $(KUBERNETES_SERVICE_HOST) ", ""},
			want: []corev1.EnvVar{
				{Name: "HTTP_PROXY", Value: "http://u:pa$$$$w$$(X)@proxy"},
				{Name: "http_proxy", Value: "http://u:pa$$$$w$$(X)@proxy"},
				{Name: "NO_PROXY", Value: "a$$b,$(KUBERNETES_SERVICE_HOST)"},
				{Name: "no_proxy", Value: "a$$b,$(KUBERNETES_SERVICE_HOST)"},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got := Env(tc.s, tc.direct)
			if tc.want == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestTrustBundle(t *testing.T) {
	hubPEM, hubDER := selfSigned(t, "hub-ca")
	hub2PEM, hub2DER := selfSigned(t, "hub-ca-2")
	proxyPEM, proxyDER := selfSigned(t, "proxy-ca")
	hubBundle := append(append([]byte{}, hubPEM...), hub2PEM...)
	// the proxy bundle repeats a hub certificate, which must not appear twice
	proxyBundle := append(append([]byte{}, proxyPEM...), hubPEM...)

	cases := []struct {
		name string
		hub  []byte
		s    Settings
		want [][]byte
	}{
		{name: "https proxy merges and dedups, hub first",
			hub: hubBundle, s: Settings{HTTPSProxy: "https://proxy:443", CABundle: proxyBundle},
			want: [][]byte{hubDER, hub2DER, proxyDER}},
		{name: "https scheme on httpProxy also merges",
			hub: hubPEM, s: Settings{HTTPProxy: "HTTPS://proxy:443", CABundle: proxyPEM},
			want: [][]byte{hubDER, proxyDER}},
		{name: "http proxy does not merge",
			hub: hubBundle, s: Settings{HTTPProxy: "http://proxy:3128", HTTPSProxy: "http://proxy:3128", CABundle: proxyPEM},
			want: [][]byte{hubDER, hub2DER}},
		{name: "no proxy does not merge",
			hub: hubPEM, s: Settings{CABundle: proxyPEM},
			want: [][]byte{hubDER}},
		{name: "empty CA bundle with https proxy",
			hub: hubBundle, s: Settings{HTTPSProxy: "https://proxy:443"},
			want: [][]byte{hubDER, hub2DER}},
		{name: "empty hub bundle",
			hub: nil, s: Settings{HTTPSProxy: "https://proxy:443", CABundle: proxyPEM},
			want: [][]byte{proxyDER}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(certDERs(g, TrustBundle(tc.hub, tc.s))).To(Equal(tc.want))
		})
	}

	t.Run("a canonical hub bundle comes back byte for byte", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(TrustBundle(hubBundle, Settings{HTTPProxy: "http://p"})).To(Equal(hubBundle))
		g.Expect(bytes.Equal(TrustBundle(hubBundle, Settings{HTTPSProxy: "https://p", CABundle: proxyPEM}),
			append(append([]byte{}, hubBundle...), proxyPEM...))).To(BeTrue())
	})
	t.Run("nothing at all is empty, not nil", func(t *testing.T) {
		g := NewWithT(t)
		got := TrustBundle(nil, Settings{})
		g.Expect(got).NotTo(BeNil())
		g.Expect(got).To(BeEmpty())
	})
}
