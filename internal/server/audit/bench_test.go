package audit

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkAuditMetadata is what auditing adds to a request at Metadata level with a file sink, kube-apiserver's
// default blocking mode: the policy, the event, its JSON and its write.
func BenchmarkAuditMetadata(b *testing.B) {
	a := startAuditor(b, Options{LogPath: filepath.Join(b.TempDir(), "audit.log"), LogMaxSize: 100, Replica: "proxy-server-0"})
	r := Request{
		Via: "user-server", Cluster: "cluster-a", User: alice, Method: http.MethodGet,
		EscapedPath: "/apis/apps/v1/namespaces/prod/deployments", RawQuery: "limit=500&resourceVersion=0",
		Header: http.Header{"User-Agent": {"kubectl/v1.37.0 (linux/amd64) kubernetes/abcdef"}}, SourceIPs: []string{"10.0.0.7"},
	}
	b.ReportAllocs()
	for b.Loop() {
		e := a.Begin(r)
		e.Complete(200, 4096, time.Time{})
	}
}
