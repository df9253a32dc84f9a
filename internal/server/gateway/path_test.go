package gateway

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestProxyPathIsWhatFollowsProxy(t *testing.T) {
	g := NewWithT(t)
	const prefix = "/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/"
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{prefix + "c1/proxy/api/v1/namespaces", "/api/v1/namespaces", true},
		{prefix + "c1/proxy", "/", true},
		{prefix + "c1/proxy/", "/", true},
		{prefix + "c1/proxy/api/v1/namespaces/a%2Fb", "/api/v1/namespaces/a%2Fb", true},
		{prefix + "c1/proxyfoo/api", "", false},
		{prefix + "c2/proxy/api", "", false},
		{"/", "", false},
	} {
		got, ok := ProxyPath(tc.path, "c1")
		g.Expect(ok).To(Equal(tc.ok), tc.path)
		g.Expect(got).To(Equal(tc.want), tc.path)
	}
}

func FuzzProxyPath(f *testing.F) {
	for _, s := range []string{"/apis/g/v1alpha1/clusters/c1/proxy/api", "/clusters/c1/proxy", "/clusters/c1/proxyx", "%%", ""} {
		f.Add(s, "c1")
	}
	f.Fuzz(func(t *testing.T, path, name string) {
		got, ok := ProxyPath(path, name)
		if ok && !strings.HasPrefix(got, "/") {
			t.Fatalf("ProxyPath(%q, %q) = %q, not a path", path, name, got)
		}
		if !ok && got != "" {
			t.Fatalf("ProxyPath(%q, %q) refused but returned %q", path, name, got)
		}
	})
}
