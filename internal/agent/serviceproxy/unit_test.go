package serviceproxy

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

func TestParseServiceTarget(t *testing.T) {
	full := func(proto, ns, name, port string) http.Header {
		h := http.Header{}
		for k, v := range map[string]string{proxyhttp.HeaderProto: proto, proxyhttp.HeaderNamespace: ns, proxyhttp.HeaderService: name, proxyhttp.HeaderPort: port} {
			if v != "" {
				h.Set(k, v)
			}
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		header  http.Header
		want    string // the URL for domain "svc"; "" means an error
		wantErr string
	}{
		{name: "http", header: full("http", "team", "echo", "8080"), want: "http://echo.team.svc:8080"},
		{name: "https", header: full("https", "team", "echo", "443"), want: "https://echo.team.svc:443"},
		{name: "proto defaults to https", header: full("", "team", "echo", "443"), want: "https://echo.team.svc:443"},
		{name: "non-canonical header names", header: http.Header{"cluster-proxy-namespace": {"team"}, "CLUSTER-PROXY-SERVICE": {"echo"}, "Cluster-Proxy-Port": {"1"}}, want: "https://echo.team.svc:1"},
		{name: "no namespace", header: full("http", "", "echo", "80"), wantErr: "Cluster-Proxy-Namespace is required"},
		{name: "no service", header: full("http", "team", "", "80"), wantErr: "Cluster-Proxy-Service is required"},
		{name: "no port", header: full("http", "team", "echo", ""), wantErr: "Cluster-Proxy-Port is required"},
		{name: "port zero", header: full("http", "team", "echo", "0"), wantErr: "port number"},
		{name: "port too large", header: full("http", "team", "echo", "65536"), wantErr: "port number"},
		{name: "port with sign", header: full("http", "team", "echo", "+80"), wantErr: "port number"},
		{name: "port with leading zero", header: full("http", "team", "echo", "080"), wantErr: "port number"},
		{name: "named port", header: full("http", "team", "echo", "web"), wantErr: "port number"},
		{name: "bad proto", header: full("HTTP", "team", "echo", "80"), wantErr: "http or https"},
		{name: "namespace with a dot", header: full("http", "team.evil", "echo", "80"), wantErr: "not a namespace name"},
		{name: "service with a slash", header: full("http", "team", "echo/x", "80"), wantErr: "not a service name"},
		{name: "service starting with a digit", header: full("http", "team", "1echo", "80"), wantErr: "not a service name"},
		{name: "host injection", header: full("http", "team", "echo", "80@evil"), wantErr: "port number"},
		{name: "twice", header: http.Header{proxyhttp.HeaderNamespace: {"team", "other"}, proxyhttp.HeaderService: {"echo"}, proxyhttp.HeaderPort: {"80"}}, wantErr: "more than once"},
		{name: "twice in different case", header: http.Header{proxyhttp.HeaderNamespace: {"team"}, "cluster-proxy-namespace": {"other"}, proxyhttp.HeaderService: {"echo"}, proxyhttp.HeaderPort: {"80"}}, wantErr: "more than once"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			target, err := parseServiceTarget(tc.header)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(target.url("svc").String()).To(Equal(tc.want))
		})
	}
}

func TestImpersonationReplacesEveryCallerImpersonateHeader(t *testing.T) {
	g := NewWithT(t)
	h := http.Header{
		"Authorization":           {"Bearer hub-token"},
		"Impersonate-User":        {"system:admin"},
		"Impersonate-Group":       {"system:masters"},
		"impersonate-group":       {"system:nodes"},
		"IMPERSONATE-UID":         {"1"},
		"Impersonate-Extra-Scope": {"all"},
		"Accept":                  {"application/json"},
	}
	identity := http.Header{"Impersonate-User": {"cluster:hub:u"}, "Impersonate-Group": {"g1", "g2"}}
	(&impersonation{headers: identity, authorization: "Bearer agent"}).apply(h)
	g.Expect(h).To(Equal(http.Header{
		"Authorization":     {"Bearer agent"},
		"Impersonate-User":  {"cluster:hub:u"},
		"Impersonate-Group": {"g1", "g2"},
		"Accept":            {"application/json"},
	}))
}

func TestImpersonatedGroupsLeaveOutSystemAuthenticated(t *testing.T) {
	g := NewWithT(t)
	g.Expect(impersonatedGroups([]string{"system:serviceaccounts", "system:authenticated", "", "team"})).
		To(Equal([]string{"system:serviceaccounts", "team"}))
	g.Expect(impersonatedGroups(nil)).To(BeEmpty())
}

func TestAgentTokenRereadsItsFile(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "token")
	g.Expect(os.WriteFile(path, []byte("first\n"), 0o600)).To(Succeed())
	tok, err := newAgentToken(&rest.Config{BearerTokenFile: path, BearerToken: "ignored"})
	g.Expect(err).NotTo(HaveOccurred())
	now := time.Now() // the file was read at creation, by the real clock
	tok.now = func() time.Time { return now }
	g.Expect(tok.get()).To(Equal("first"))

	g.Expect(os.WriteFile(path, []byte("second"), 0o600)).To(Succeed())
	now = now.Add(tok.period / 2)
	g.Expect(tok.get()).To(Equal("first"), "read again only once a period")
	now = now.Add(tok.period)
	g.Expect(tok.get()).To(Equal("second"), "a rotated token is picked up")

	g.Expect(os.Remove(path)).To(Succeed())
	now = now.Add(2 * tok.period)
	g.Expect(tok.get()).To(Equal("second"), "the last token stays in use while the file is missing")

	_, err = newAgentToken(&rest.Config{BearerTokenFile: path})
	g.Expect(err).To(MatchError(ContainSubstring("read the agent's token")))
	none, err := newAgentToken(&rest.Config{})
	g.Expect(err).NotTo(HaveOccurred(), "a kubeconfig without a token serves everything but impersonation")
	_, err = none.get()
	g.Expect(err).To(MatchError(errNoAgentToken))
	static, err := newAgentToken(&rest.Config{BearerToken: "static"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(static.get()).To(Equal("static"))
}

func TestNewValidatesOptions(t *testing.T) {
	g := NewWithT(t)
	_, err := New(Options{})
	g.Expect(err).To(MatchError(ContainSubstring("Options.Kube")))
	_, err = New(Options{Kube: &rest.Config{Host: "https://127.0.0.1:6443"}})
	g.Expect(err).NotTo(HaveOccurred(), "without a token of its own the agent still passes the cluster's tokens through")
}
