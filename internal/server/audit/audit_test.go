package audit

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// Every request becomes one audit.k8s.io/v1 Event in the log, a JSON line, that names what the managed
// kube-apiserver was asked (verb, object or path) as it would itself, by whom, from where, and how it was answered.
func TestTheLogRecordsOneV1EventPerRequestAsTheManagedKubeAPIServerWould(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "audit", "audit.log")
	a := startAuditor(t, Options{LogPath: path, Replica: "proxy-server-0", Clock: clocktesting.NewFakePassiveClock(t0)})

	spdy := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"SPDY/3.1"}, "User-Agent": {"kubectl/v1.37.0"}}
	websocket := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "User-Agent": {"kubectl/v1.37.0"}}
	clusterToken := http.Header{"Authorization": {"Bearer the-clusters-own"}, "User-Agent": {"curl/8"}}
	cases := []struct {
		name                string
		noHubUser           bool
		method, path, query string
		header              http.Header
		code                int
		wantVerb, wantURI   string
		wantObject          *auditv1.ObjectReference
	}{{
		name: "get pod", method: http.MethodGet, path: "/api/v1/namespaces/default/pods/nginx", code: 200,
		wantVerb: "get", wantURI: "/api/v1/namespaces/default/pods/nginx",
		wantObject: &auditv1.ObjectReference{Resource: "pods", Namespace: "default", Name: "nginx", APIVersion: "v1"},
	}, {
		name: "list deployments", method: http.MethodGet, path: "/apis/apps/v1/namespaces/prod/deployments", query: "limit=500", code: 200,
		wantVerb: "list", wantURI: "/apis/apps/v1/namespaces/prod/deployments?limit=500",
		wantObject: &auditv1.ObjectReference{Resource: "deployments", Namespace: "prod", APIGroup: "apps", APIVersion: "v1"},
	}, {
		name: "watch deployments", method: http.MethodGet, path: "/apis/apps/v1/namespaces/prod/deployments",
		query: "allowWatchBookmarks=true&resourceVersion=12&watch=true", code: 200,
		wantVerb: "watch", wantURI: "/apis/apps/v1/namespaces/prod/deployments?allowWatchBookmarks=true&resourceVersion=12&watch=true",
		wantObject: &auditv1.ObjectReference{Resource: "deployments", Namespace: "prod", APIGroup: "apps", APIVersion: "v1"},
	}, {
		name: "exec over SPDY", method: http.MethodPost, path: "/api/v1/namespaces/default/pods/nginx/exec",
		query: "command=sh&stdin=true&tty=true", header: spdy, code: http.StatusSwitchingProtocols,
		wantVerb: "create", wantURI: "/api/v1/namespaces/default/pods/nginx/exec?command=sh&stdin=true&tty=true",
		wantObject: &auditv1.ObjectReference{Resource: "pods", Subresource: "exec", Namespace: "default", Name: "nginx", APIVersion: "v1"},
	}, {
		name: "exec over websocket", method: http.MethodGet, path: "/api/v1/namespaces/default/pods/nginx/exec",
		query: "command=sh", header: websocket, code: http.StatusSwitchingProtocols,
		wantVerb: "create", wantURI: "/api/v1/namespaces/default/pods/nginx/exec?command=sh",
		wantObject: &auditv1.ObjectReference{Resource: "pods", Subresource: "exec", Namespace: "default", Name: "nginx", APIVersion: "v1"},
	}, {
		name: "non-resource path", method: http.MethodGet, path: "/healthz", code: 200,
		wantVerb: "get", wantURI: "/healthz",
	}, {
		name: "refused", method: http.MethodDelete, path: "/api/v1/namespaces/kube-system/secrets/admin", code: http.StatusForbidden,
		wantVerb: "delete", wantURI: "/api/v1/namespaces/kube-system/secrets/admin",
		wantObject: &auditv1.ObjectReference{Resource: "secrets", Namespace: "kube-system", Name: "admin", APIVersion: "v1"},
	}, {
		name: "token the hub does not know", noHubUser: true, header: clusterToken, method: http.MethodGet,
		path: "/api/v1/nodes", code: http.StatusUnauthorized, wantVerb: "list", wantURI: "/api/v1/nodes",
		wantObject: &auditv1.ObjectReference{Resource: "nodes", APIVersion: "v1"},
	}}

	ids := map[string]string{}
	for i, c := range cases {
		header := c.header
		if header == nil {
			header = http.Header{"User-Agent": {"kubectl/v1.37.0"}, "Accept": {"application/json"}}
		}
		r := Request{
			Via: "user-server", Cluster: "cluster-a", User: alice, Method: c.method, EscapedPath: c.path,
			RawQuery: c.query, Header: header, SourceIPs: []string{"192.0.2.1", "10.0.0.7"}, Received: t0,
		}
		if c.noHubUser {
			r.User = nil
		}
		e := a.Begin(r)
		g.Expect(e.Level()).To(Equal(auditinternal.LevelMetadata), c.name)
		e.Complete(c.code, int64(100+i), t0.Add(1500*time.Millisecond))
		ids[c.name] = e.ID()
	}

	events := readEvents(g, path)
	g.Expect(events).To(HaveLen(len(cases)), "one event a request, at ResponseComplete")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			evs := byID(events, ids[c.name])
			g.Expect(evs).To(HaveLen(1))
			ev := evs[0]
			g.Expect(ev.Level).To(Equal(auditv1.LevelMetadata))
			g.Expect(ev.Stage).To(Equal(auditv1.StageResponseComplete))
			g.Expect(ev.Verb).To(Equal(c.wantVerb))
			g.Expect(ev.RequestURI).To(Equal(c.wantURI))
			g.Expect(ev.ObjectRef).To(Equal(c.wantObject))
			g.Expect(ev.ResponseStatus).NotTo(BeNil())
			g.Expect(ev.ResponseStatus.Code).To(BeEquivalentTo(c.code))
			g.Expect(ev.SourceIPs).To(Equal([]string{"192.0.2.1", "10.0.0.7"}))
			g.Expect(ev.RequestReceivedTimestamp.Time.Equal(t0)).To(BeTrue(), "%s", ev.RequestReceivedTimestamp)
			g.Expect(ev.StageTimestamp.Time.Equal(t0.Add(1500*time.Millisecond))).To(BeTrue(), "%s", ev.StageTimestamp)
			g.Expect(ev.RequestObject).To(BeNil(), "Metadata keeps no body")
			g.Expect(ev.ResponseObject).To(BeNil())
			g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationCluster, "cluster-a"))
			g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationVia, "user-server"))
			g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationReplica, "proxy-server-0"))
			g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationDuration, "1.5"))
			g.Expect(ev.Annotations).To(HaveKey(AnnotationResponseBytes))
			if c.noHubUser {
				g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationIdentity, IdentityClusterToken))
				g.Expect(ev.User).To(Equal(authnv1.UserInfo{}), "the hub does not know who it is")
				g.Expect(ev.UserAgent).To(Equal("curl/8"))
				return
			}
			g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationIdentity, IdentityHub))
			g.Expect(ev.User).To(Equal(authnv1.UserInfo{
				Username: "alice", UID: "uid-alice", Groups: []string{"team-a", "system:authenticated"},
				Extra: map[string]authnv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"JTI=1234"}},
			}))
			g.Expect(ev.UserAgent).To(Equal("kubectl/v1.37.0"))
		})
	}
	g.Expect(byID(events, ids["refused"])[0].Annotations).To(HaveKeyWithValue(AnnotationResponseBytes, "106"))
}

// On the aggregated path the event takes the hub kube-apiserver's Audit-ID, so that it joins the hub's audit log;
// an ID that could not be a header value or a log field is replaced.
func TestAnEventKeepsTheHubsAuditID(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	a := startAuditor(t, Options{LogPath: path})

	hub := getPod("a")
	hub.AuditID = "5e1d9c2a-0b7f-4e55-9a53-2f0b2b8f0c11"
	e := a.Begin(hub)
	g.Expect(e.ID()).To(Equal(hub.AuditID))
	e.Complete(200, 0, time.Time{})

	forged := getPod("b")
	forged.AuditID = "x\ninjected"
	f := a.Begin(forged)
	g.Expect(f.ID()).NotTo(Equal(forged.AuditID))
	g.Expect(f.ID()).To(MatchRegexp(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`))
	f.Complete(200, 0, time.Time{})

	events := readEvents(g, path)
	g.Expect(byID(events, hub.AuditID)).To(HaveLen(1))
	g.Expect(byID(events, f.ID())).To(HaveLen(1))
}

// A nil Auditor (auditing off) hands out nil entries, on which everything is a no-op.
func TestANilAuditorRecordsNothing(t *testing.T) {
	g := NewWithT(t)
	var a *Auditor
	a.Run(t.Context())
	e := a.Begin(getPod("a"))
	g.Expect(e).To(BeNil())
	g.Expect(e.Level()).To(Equal(auditinternal.LevelNone))
	g.Expect(e.ID()).To(BeEmpty())
	g.Expect(e.Admit()).To(Succeed())
	e.RequestBody([]byte(`{}`), "application/json")
	e.Started(200, time.Time{})
	e.Complete(200, 0, time.Time{})
	g.Expect(a.Health()).To(BeEmpty())
	a.Shutdown()
}
