package userserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	apiaudit "k8s.io/apiserver/pkg/audit"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/audit"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// auditedEnv is a hub user-server that writes its audit events to a file, at the level policy gives (a file's
// content; "" is the default policy).
func auditedEnv(t *testing.T, policy string) (*hubEnv, func() []auditv1.Event) {
	t.Helper()
	auditor, events := fileAuditor(t, policy)
	p := newPKI(t)
	return newHubEnv(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster1", Options{Audit: auditor}, p.impersonator), events
}

// fileAuditor writes audit events to a file, at the level policy gives; events reads them back.
func fileAuditor(t *testing.T, policy string) (*audit.Auditor, func() []auditv1.Event) {
	t.Helper()
	dir := t.TempDir()
	opts := audit.NewOptions()
	opts.LogPath = filepath.Join(dir, "audit.log")
	opts.Replica = "replica-a"
	if policy != "" {
		opts.PolicyFile = filepath.Join(dir, "policy.yaml")
		if err := os.WriteFile(opts.PolicyFile, []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	auditor, err := audit.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	auditor.Run(ctx)
	t.Cleanup(func() { cancel(); auditor.Shutdown() })
	return auditor, func() []auditv1.Event {
		raw, err := os.ReadFile(opts.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		var out []auditv1.Event
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var ev auditv1.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("a line that is not an event: %q: %v", line, err)
			}
			out = append(out, ev)
		}
		return out
	}
}

// do sends a request to the user-server and returns its code and Audit-ID header.
func (h *hubEnv) do(t *testing.T, method, path, token string, header http.Header, body io.Reader) (int, string) {
	t.Helper()
	req := h.request(t, method, path, header)
	if token != "" {
		req.Header.Set("Authorization", token)
	}
	if body != nil {
		req.Body = io.NopCloser(body)
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.frontend.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Audit-ID")
}

func TestEveryUserServerRequestIsAuditedWithTheHubUserTheInnerRequestAndItsAnswer(t *testing.T) {
	g := NewWithT(t)
	h, events := auditedEnv(t, "")
	code, listID := h.do(t, http.MethodGet, "/cluster1/api/v1/namespaces/default/pods?watch=false", hubToken, nil, nil)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(listID).NotTo(BeEmpty(), "the client can name the request")
	code, _ = h.do(t, http.MethodGet, "/cluster2/api/v1/namespaces", hubToken, nil, nil)
	g.Expect(code).To(Equal(http.StatusForbidden), "the hub does not grant cluster2")
	code, _ = h.do(t, http.MethodGet, "/cluster1/version", "", nil, nil)
	g.Expect(code).To(Equal(http.StatusUnauthorized))
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Protocol": {"v5.channel.k8s.io"}}
	code, _ = h.do(t, http.MethodGet, "/cluster2/api/v1/namespaces/default/pods/p/exec?command=sh&command=-c&command=id", hubToken, upgrade, nil)
	g.Expect(code).To(Equal(http.StatusForbidden))

	evs := events()
	g.Expect(evs).To(HaveLen(4), "one event a request, served or refused")
	list := evs[0]
	g.Expect(string(list.AuditID)).To(Equal(listID), "the Audit-ID answered is the event's")
	g.Expect(list.Stage).To(Equal(auditv1.StageResponseComplete))
	g.Expect(list.Level).To(Equal(auditv1.LevelMetadata))
	g.Expect(list.User.Username).To(Equal(alice.User))
	g.Expect(list.User.Groups).To(Equal(alice.Groups))
	g.Expect(list.Verb).To(Equal("list"))
	g.Expect(list.ObjectRef).To(Equal(&auditv1.ObjectReference{Resource: "pods", Namespace: "default", APIVersion: "v1"}))
	g.Expect(list.RequestURI).To(Equal("/api/v1/namespaces/default/pods?watch=false"), "the request to the cluster")
	g.Expect(list.ResponseStatus.Code).To(BeEquivalentTo(http.StatusOK))
	g.Expect(list.Annotations).To(And(HaveKeyWithValue(audit.AnnotationCluster, "cluster1"),
		HaveKeyWithValue(audit.AnnotationVia, "user-server"), HaveKeyWithValue(audit.AnnotationReplica, "replica-a"),
		HaveKeyWithValue(audit.AnnotationResponseBytes, "38"), HaveKey(audit.AnnotationDuration)), "%v", list.Annotations)
	g.Expect(list.RequestObject).To(BeNil(), "Metadata keeps no body")

	g.Expect(evs[1].ResponseStatus.Code).To(BeEquivalentTo(http.StatusForbidden))
	g.Expect(evs[1].Annotations).To(HaveKeyWithValue(audit.AnnotationCluster, "cluster2"))
	g.Expect(evs[2].ResponseStatus.Code).To(BeEquivalentTo(http.StatusUnauthorized))
	g.Expect(evs[2].User.Username).To(BeEmpty(), "no one the hub knows")
	g.Expect(evs[2].ObjectRef).To(BeNil())
	g.Expect(evs[2].RequestURI).To(Equal("/version"))
	exec := evs[3]
	g.Expect(exec.Verb).To(Equal("create"), "a stream is authorized as create, and recorded so")
	g.Expect(exec.ObjectRef).To(HaveField("Subresource", "exec"))
	g.Expect(exec.RequestURI).To(ContainSubstring("command=sh&command=-c&command=id"))
	g.Expect(exec.ResponseStatus.Code).To(BeEquivalentTo(http.StatusForbidden))
}

func TestNoCredentialReachesAnAuditEvent(t *testing.T) {
	g := NewWithT(t)
	h, events := auditedEnv(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n")
	code, _ := h.do(t, http.MethodPost, "/cluster1/api/v1/namespaces/default/configmaps?access_token=query-secret", hubToken,
		http.Header{"X-Remote-User": {"header-secret"}}, strings.NewReader(`{"kind":"ConfigMap","data":{"k":"v"}}`))
	g.Expect(code).To(Equal(http.StatusOK))
	raw, err := json.Marshal(events())
	g.Expect(err).NotTo(HaveOccurred())
	for _, secret := range []string{"hub-alice", "query-secret", "header-secret", "Bearer"} {
		g.Expect(string(raw)).NotTo(ContainSubstring(secret))
	}
	evs := events()
	g.Expect(evs).To(HaveLen(2), "stages RequestReceived and ResponseComplete: the policy omits neither")
	g.Expect(evs[1].Stage).To(Equal(auditv1.StageResponseComplete))
	g.Expect(evs[1].RequestObject).NotTo(BeNil(), "the policy asked for the body")
	g.Expect(string(evs[1].RequestObject.Raw)).To(ContainSubstring(`"data":{"k":"v"}`))
}

func TestARequestWithAClustersOwnTokenIsAuditedWithoutAUserOrItsToken(t *testing.T) {
	g := NewWithT(t)
	auditor, events := fileAuditor(t, "")
	e := newEnv(t, http.HandlerFunc((&seen{}).handler), Options{Hub: &fakeHub{}, Audit: auditor}, "cluster1")
	code, body := e.get(t, "/cluster1/api/v1/namespaces")
	g.Expect(code).To(Equal(http.StatusOK), body)
	evs := events()
	g.Expect(evs).To(HaveLen(1))
	g.Expect(evs[0].User.Username).To(BeEmpty())
	g.Expect(evs[0].Annotations).To(HaveKeyWithValue(audit.AnnotationIdentity, audit.IdentityClusterToken),
		"a token only the cluster knows: the hub cannot say whose it is")
	raw, err := json.Marshal(evs)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(raw)).NotTo(ContainSubstring(strings.TrimPrefix(testToken, "Bearer ")))
}

func TestTheAggregatedPathKeepsTheHubsAuditIDAndAuditsWhatItRefused(t *testing.T) {
	g := NewWithT(t)
	h, events := auditedEnv(t, "")
	serve := func(handle func(w http.ResponseWriter, r *http.Request)) int {
		ctx := apiaudit.WithAuditContext(context.Background())
		apiaudit.WithAuditID(ctx, types.UID("hub-audit-id-1"))
		r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/cluster1/proxy/api/v1/namespaces", nil)
		w := httptest.NewRecorder()
		handle(w, r)
		return w.Code
	}
	g.Expect(serve(func(w http.ResponseWriter, r *http.Request) {
		h.server.ServeHubIdentity(w, r, "cluster1", "/api/v1/namespaces", alice)
	})).To(Equal(http.StatusOK))
	g.Expect(serve(func(w http.ResponseWriter, r *http.Request) {
		h.server.RefuseHubIdentity(w, r, "cluster1", "/api/v1/namespaces/default/pods/p/exec", hubidentity.Identity{User: "dave"},
			http.StatusForbidden, metav1.StatusReasonForbidden, "dave cannot create clusters/proxy")
	})).To(Equal(http.StatusForbidden))

	evs := events()
	g.Expect(evs).To(HaveLen(2))
	for _, ev := range evs {
		g.Expect(string(ev.AuditID)).To(Equal("hub-audit-id-1"), "the hub's audit log has the same id")
		g.Expect(ev.Annotations).To(HaveKeyWithValue(audit.AnnotationVia, "aggregated"))
	}
	g.Expect(evs[0].User.Username).To(Equal(alice.User))
	g.Expect(evs[1].User.Username).To(Equal("dave"))
	g.Expect(evs[1].ObjectRef).To(HaveField("Subresource", "exec"))
	g.Expect(evs[1].ResponseStatus.Code).To(BeEquivalentTo(http.StatusForbidden))
}
