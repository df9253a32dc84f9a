package userserver

import (
	"reflect"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParsePath(t *testing.T) {
	svcPath := "/api/v1/namespaces/ns1/services/"
	for _, tc := range []struct {
		name, path string
		want       Target
		wantErr    string
	}{
		{name: "kube path with the cluster prefix removed", path: "/cluster1/api/v1/namespaces/default/pods",
			want: Target{Cluster: "cluster1", Path: "/api/v1/namespaces/default/pods"}},
		{name: "cluster alone is the apiserver root", path: "/cluster1",
			want: Target{Cluster: "cluster1", Path: "/"}},
		{name: "trailing slash is kept", path: "/cluster1/apis/",
			want: Target{Cluster: "cluster1", Path: "/apis/"}},
		{name: "digit-leading cluster", path: "/1st/api",
			want: Target{Cluster: "1st", Path: "/api"}},
		{name: "dotted cluster (DNS subdomain)", path: "/east.prod-2/version",
			want: Target{Cluster: "east.prod-2", Path: "/version"}},
		{name: "escapes are decoded", path: "/c1/api/v1/namespaces/ns/pods/p%3A8080/proxy/a%20b",
			want: Target{Cluster: "c1", Path: "/api/v1/namespaces/ns/pods/p:8080/proxy/a b"}},
		{name: "kube service proxy is a kube path", path: "/c1/api/v1/namespaces/ns1/services/svc/proxy/x",
			want: Target{Cluster: "c1", Path: "/api/v1/namespaces/ns1/services/svc/proxy/x"}},
		{name: "proxy-service marker elsewhere is a kube path", path: "/c1/api/v1/namespaces/ns1/pods/p/proxy-service/x",
			want: Target{Cluster: "c1", Path: "/api/v1/namespaces/ns1/pods/p/proxy-service/x"}},

		{name: "service, defaults https:443", path: "/c1" + svcPath + "svc/proxy-service/metrics",
			want: Target{Cluster: "c1", Path: "/metrics",
				Service: &ServiceRef{Namespace: "ns1", Name: "svc", Proto: "https", Port: 443}}},
		{name: "service http defaults to port 80", path: "/c1" + svcPath + "http:svc/proxy-service/a/b",
			want: Target{Cluster: "c1", Path: "/a/b",
				Service: &ServiceRef{Namespace: "ns1", Name: "svc", Proto: "http", Port: 80}}},
		{name: "service name:port", path: "/c1" + svcPath + "svc:8080/proxy-service/",
			want: Target{Cluster: "c1", Path: "/",
				Service: &ServiceRef{Namespace: "ns1", Name: "svc", Proto: "https", Port: 8080}}},
		{name: "service proto:name:port", path: "/c1" + svcPath + "http:svc:9090/proxy-service/x",
			want: Target{Cluster: "c1", Path: "/x",
				Service: &ServiceRef{Namespace: "ns1", Name: "svc", Proto: "http", Port: 9090}}},
		{name: "service named like a proto with a port", path: "/c1" + svcPath + "http:8080/proxy-service/x",
			want: Target{Cluster: "c1", Path: "/x",
				Service: &ServiceRef{Namespace: "ns1", Name: "http", Proto: "https", Port: 8080}}},
		{name: "service without path", path: "/c1" + svcPath + "svc/proxy-service",
			want: Target{Cluster: "c1", Path: "/",
				Service: &ServiceRef{Namespace: "ns1", Name: "svc", Proto: "https", Port: 443}}},

		{name: "empty", path: "", wantErr: "must start with /"},
		{name: "root", path: "/", wantErr: "must start with /<cluster>"},
		{name: "not a path", path: "*", wantErr: "must start with /"},
		{name: "uppercase cluster", path: "/Cluster1/api", wantErr: "invalid cluster name"},
		{name: "cluster with underscore", path: "/c_1/api", wantErr: "invalid cluster name"},
		{name: "dot-dot", path: "/c1/api/../../c2/api", wantErr: `".."`},
		{name: "dot-dot in cluster position", path: "/../c1/api", wantErr: `".."`},
		{name: "encoded dot-dot", path: "/c1/api/%2e%2E/x", wantErr: `".."`},
		{name: "single dot", path: "/c1/./api", wantErr: `"."`},
		{name: "encoded slash", path: "/c1/api/v1/namespaces/a%2Fb/pods", wantErr: "encoded slashes"},
		{name: "encoded slash lower case", path: "/c1%2fc2/api", wantErr: "encoded slashes"},
		{name: "backslash", path: `/c1/api\..\x`, wantErr: "backslashes"},
		{name: "encoded backslash", path: "/c1/api%5C..", wantErr: "backslashes"},
		{name: "empty segment", path: "/c1//api", wantErr: "empty segments"},
		{name: "leading double slash", path: "//c1/api", wantErr: "empty segments"},
		{name: "bad escape", path: "/c1/api%zz", wantErr: "invalid escape"},
		{name: "encoded NUL", path: "/c1/api%00", wantErr: "control characters"},
		{name: "encoded newline", path: "/c1/a%0Ab", wantErr: "control characters"},
		{name: "service with bad proto", path: "/c1" + svcPath + "ftp:svc:21/proxy-service/", wantErr: "http or https"},
		{name: "service port 0", path: "/c1" + svcPath + "svc:0/proxy-service/", wantErr: "port must be"},
		{name: "service port too big", path: "/c1" + svcPath + "svc:65536/proxy-service/", wantErr: "port must be"},
		{name: "service signed port", path: "/c1" + svcPath + "svc:+80/proxy-service/", wantErr: "port must be"},
		{name: "service named port", path: "/c1" + svcPath + "https:svc:web/proxy-service/", wantErr: "port must be"},
		{name: "service too many colons", path: "/c1" + svcPath + "http:svc:80:1/proxy-service/", wantErr: "[proto:]name[:port]"},
		{name: "service digit-leading name", path: "/c1" + svcPath + "1svc/proxy-service/", wantErr: "invalid service name"},
		{name: "service empty name", path: "/c1" + svcPath + "http:/proxy-service/", wantErr: "invalid service name"},
		{name: "service bad namespace", path: "/c1/api/v1/namespaces/NS/services/svc/proxy-service/", wantErr: "invalid namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParsePath(tc.path)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestParsePathQuotesLongInputShortened(t *testing.T) {
	g := NewWithT(t)
	_, err := ParsePath("/" + strings.Repeat("X", 10000) + "/api")
	g.Expect(err).To(MatchError(ContainSubstring("invalid cluster name")))
	g.Expect(len(err.Error())).To(BeNumerically("<", 1000))
}

// FuzzParsePath: no input panics, and whatever parses is safe to forward.
func FuzzParsePath(f *testing.F) {
	for _, seed := range []string{
		"", "/", "/c1", "/c1/", "/1st/api/v1/pods?watch=1", "/c1/api/v1/namespaces/ns/services/svc/proxy-service/x",
		"/c1/api/v1/namespaces/ns/services/http:svc:80/proxy-service", "/c1/api/v1/namespaces/ns/services/a:b:c:d/proxy-service/",
		"/c1/%2e%2e/x", "/c1/a%2Fb", "/c1//x", `/c1\x`, "/c1/%", "/c1/%zz", "/c1/%00", "/a.b.c/apis/",
		"/c1/api/v1/namespaces/ns/services/svc:99999/proxy-service/", "/C1/api", "/" + strings.Repeat("a", 300),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := ParsePath(p)
		if err != nil {
			return
		}
		if errs := validation.IsDNS1123Subdomain(got.Cluster); len(errs) > 0 {
			t.Fatalf("ParsePath(%q) accepted cluster %q: %v", p, got.Cluster, errs)
		}
		if !strings.HasPrefix(got.Path, "/") || strings.Contains(got.Path, "//") || strings.Contains(got.Path, `\`) {
			t.Fatalf("ParsePath(%q) gave path %q", p, got.Path)
		}
		for _, seg := range strings.Split(got.Path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("ParsePath(%q) kept a dot segment in %q", p, got.Path)
			}
		}
		if strings.ContainsFunc(got.Path, isControl) {
			t.Fatalf("ParsePath(%q) kept a control character in %q", p, got.Path)
		}
		if svc := got.Service; svc != nil {
			if !isProto(svc.Proto) || svc.Port < 1 || svc.Port > 65535 ||
				len(validation.IsDNS1123Label(svc.Namespace)) > 0 || len(validation.IsDNS1035Label(svc.Name)) > 0 {
				t.Fatalf("ParsePath(%q) gave service %+v", p, *svc)
			}
		}
	})
}

// FuzzTheClusterPathParsesAsTheUserServerPath: a path the aggregated API hands over for a cluster is read exactly as
// the user-server's own /<cluster><path> is, refusals included, so both ways in decide alike.
func FuzzTheClusterPathParsesAsTheUserServerPath(f *testing.F) {
	for _, seed := range []string{"/", "/api/v1/pods", "/api/v1/namespaces/ns/services/svc/proxy-service/x", "/%2e%2e/x",
		"//x", "/a%2Fb", "", "x", "/%00"} {
		f.Add("c1", seed)
	}
	f.Add("", "/api")
	f.Add("C1", "/api")
	f.Fuzz(func(t *testing.T, cluster, escaped string) {
		if strings.ContainsAny(cluster, "/%\\") {
			return // a name the aggregated API never hands over: it is one path segment there
		}
		got, gotErr := ParseClusterPath(cluster, escaped)
		if !strings.HasPrefix(escaped, "/") {
			if gotErr == nil {
				t.Fatalf("ParseClusterPath(%q, %q) accepted a path without its leading slash", cluster, escaped)
			}
			return
		}
		want, wantErr := ParsePath("/" + cluster + escaped)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("ParseClusterPath(%q, %q) error %v, ParsePath error %v", cluster, escaped, gotErr, wantErr)
		}
		if gotErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("ParseClusterPath(%q, %q) = %+v, ParsePath = %+v", cluster, escaped, got, want)
		}
	})
}
