package audit

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

const rulesPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: None
  userGroups: ["quiet"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz"]
- level: Request
  resources:
  - group: ""
    resources: ["configmaps"]
- level: RequestResponse
  verbs: ["patch"]
  resources:
  - group: "apps"
    resources: ["deployments/scale"]
- level: None
  verbs: ["watch"]
  namespaces: ["kube-system"]
- level: Metadata
`

// The policy decides, rule by rule as kube-apiserver's does, whether a request is recorded and how much of it: None
// records nothing, Metadata no body, Request and RequestResponse the JSON body.
func TestThePolicyDecidesWhatIsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a := startAuditor(t, Options{LogPath: path, PolicyFile: writeFile(t, "policy.yaml", rulesPolicy)})
	body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"k":"v"}}`)

	cases := []struct {
		name                string
		user                *hubidentity.Identity
		method, path, query string
		want                auditinternal.Level
	}{
		{name: "user rule", user: &hubidentity.Identity{User: "system:kube-proxy"}, method: http.MethodGet, path: "/api/v1/nodes", want: auditinternal.LevelNone},
		{name: "group rule", user: &hubidentity.Identity{User: "bob", Groups: []string{"quiet"}}, method: http.MethodGet, path: "/api/v1/nodes", want: auditinternal.LevelNone},
		{name: "non-resource rule with a trailing *", user: alice, method: http.MethodGet, path: "/healthz/etcd", want: auditinternal.LevelNone},
		{name: "non-resource path no rule names", user: alice, method: http.MethodGet, path: "/version", want: auditinternal.LevelMetadata},
		{name: "resource rule", user: alice, method: http.MethodPost, path: "/api/v1/namespaces/a/configmaps", want: auditinternal.LevelRequest},
		{name: "resource rule, another resource", user: alice, method: http.MethodPost, path: "/api/v1/namespaces/a/secrets", want: auditinternal.LevelMetadata},
		{name: "subresource and verb rule", user: alice, method: http.MethodPatch, path: "/apis/apps/v1/namespaces/a/deployments/d/scale", want: auditinternal.LevelRequestResponse},
		{name: "subresource rule, another verb", user: alice, method: http.MethodGet, path: "/apis/apps/v1/namespaces/a/deployments/d/scale", want: auditinternal.LevelMetadata},
		{name: "namespace and verb rule", user: alice, method: http.MethodGet, path: "/api/v1/namespaces/kube-system/pods", query: "watch=1", want: auditinternal.LevelNone},
		{name: "namespace rule, a list", user: alice, method: http.MethodGet, path: "/api/v1/namespaces/kube-system/pods", want: auditinternal.LevelMetadata},
		{name: "no hub user", method: http.MethodGet, path: "/api/v1/nodes", want: auditinternal.LevelMetadata},
	}
	ids := map[string]string{}
	for _, c := range cases {
		e := a.Begin(Request{Cluster: "c", User: c.user, Method: c.method, EscapedPath: c.path, RawQuery: c.query, Received: t0})
		g := NewWithT(t)
		g.Expect(e.Level()).To(Equal(c.want), c.name)
		e.RequestBody(body, "application/json; charset=utf-8")
		e.Complete(200, 0, time.Time{})
		ids[c.name] = e.ID()
	}

	events := readEvents(NewWithT(t), path)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			evs := byID(events, ids[c.name])
			if c.want == auditinternal.LevelNone {
				g.Expect(evs).To(BeEmpty())
				return
			}
			g.Expect(evs).To(HaveLen(1))
			g.Expect(evs[0].Level).To(BeEquivalentTo(c.want))
			if c.want.Less(auditinternal.LevelRequest) {
				g.Expect(evs[0].RequestObject).To(BeNil())
				return
			}
			g.Expect(evs[0].RequestObject).NotTo(BeNil())
			g.Expect(evs[0].RequestObject.Raw).To(MatchJSON(body))
		})
	}
}

// A request body is kept only when it is JSON, valid and at most MaxRequestBody bytes, compacted to one line; the
// event says why one was not kept.
func TestARequestBodyIsKeptOnlyAsJSONWithinTheBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	policy := writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Request\n")
	a := startAuditor(t, Options{LogPath: path, PolicyFile: policy})

	big := `{"data":"` + strings.Repeat("x", MaxRequestBody) + `"}`
	cases := []struct {
		name, contentType, body string
		wantRaw, wantNote       string
	}{
		{name: "JSON over lines", contentType: "application/json", body: "{\n  \"a\": [1, 2],\n  \"b\": \"x\"\n}\n", wantRaw: `{"a":[1,2],"b":"x"}`},
		{name: "merge patch", contentType: "application/merge-patch+json", body: `{"spec":{"replicas":3}}`, wantRaw: `{"spec":{"replicas":3}}`},
		{name: "too large", contentType: "application/json", body: big, wantNote: "omitted: larger than 65536 bytes"},
		{name: "protobuf", contentType: "application/vnd.kubernetes.protobuf", body: "k8s\x00\x0a", wantNote: "omitted: not JSON"},
		{name: "apply patch in YAML", contentType: "application/apply-patch+yaml", body: "a: b\n", wantNote: "omitted: not JSON"},
		{name: "broken JSON", contentType: "application/json", body: `{"a":`, wantNote: "omitted: not valid JSON"},
	}
	ids := map[string]string{}
	for _, c := range cases {
		e := a.Begin(Request{User: alice, Method: http.MethodPost, EscapedPath: "/api/v1/namespaces/a/configmaps"})
		e.RequestBody([]byte(c.body), c.contentType)
		e.Complete(201, 0, time.Time{})
		ids[c.name] = e.ID()
	}
	data, err := os.ReadFile(path)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	events := decodeEvents(NewWithT(t), data)
	NewWithT(t).Expect(strings.Count(string(data), "\n")).To(Equal(len(cases)), "one line an event")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			evs := byID(events, ids[c.name])
			g.Expect(evs).To(HaveLen(1))
			if c.wantNote != "" {
				g.Expect(evs[0].RequestObject).To(BeNil())
				g.Expect(evs[0].Annotations).To(HaveKeyWithValue(AnnotationRequestBody, c.wantNote))
				return
			}
			g.Expect(evs[0].RequestObject).NotTo(BeNil())
			g.Expect(string(evs[0].RequestObject.Raw)).To(Equal(c.wantRaw))
			g.Expect(evs[0].Annotations).NotTo(HaveKey(AnnotationRequestBody))
		})
	}
}

// Stages are recorded as the policy says, as kube-apiserver records them: RequestReceived at Begin, ResponseStarted
// for long-running requests only, ResponseComplete at Complete, all under one audit ID.
func TestThePolicysStagesAreRecorded(t *testing.T) {
	g := NewWithT(t)
	path := filepath.Join(t.TempDir(), "audit.log")
	stages := writeFile(t, "policy.yaml", `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: Metadata
  resources: [{group: "", resources: ["pods"]}]
- level: Metadata
  omitStages: ["ResponseComplete"]
`)
	a := startAuditor(t, Options{LogPath: path, PolicyFile: stages})

	watch := Request{User: alice, Method: http.MethodGet, EscapedPath: "/api/v1/namespaces/a/pods", RawQuery: "watch=true", Received: t0}
	w := a.Begin(watch)
	w.Started(200, t0.Add(time.Millisecond))
	w.Complete(200, 10, t0.Add(time.Minute))

	get := a.Begin(Request{User: alice, Method: http.MethodGet, EscapedPath: "/api/v1/namespaces/a/pods/p", Received: t0})
	get.Started(200, t0.Add(time.Millisecond)) // not long-running: no such stage
	get.Complete(200, 10, t0.Add(time.Second))

	omitted := a.Begin(Request{User: alice, Method: http.MethodGet, EscapedPath: "/api/v1/nodes", Received: t0})
	omitted.Complete(200, 10, t0.Add(time.Second))

	events := readEvents(g, path)
	stagesOf := func(id string) []auditv1.Stage {
		var s []auditv1.Stage
		for _, ev := range byID(events, id) {
			s = append(s, ev.Stage)
		}
		return s
	}
	g.Expect(stagesOf(w.ID())).To(Equal([]auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseStarted, auditv1.StageResponseComplete}))
	g.Expect(stagesOf(get.ID())).To(Equal([]auditv1.Stage{auditv1.StageRequestReceived, auditv1.StageResponseComplete}))
	g.Expect(stagesOf(omitted.ID())).To(Equal([]auditv1.Stage{auditv1.StageRequestReceived}))
	received := byID(events, w.ID())[0]
	g.Expect(received.ResponseStatus).To(BeNil())
	g.Expect(received.StageTimestamp.Time.Equal(t0)).To(BeTrue())
	g.Expect(received.Annotations).NotTo(HaveKey(AnnotationResponseBytes))
}

// A policy kube-apiserver would not load fails New, naming the flag.
func TestAMalformedPolicyFailsNewNamingTheFlag(t *testing.T) {
	cases := map[string]string{
		"not YAML":          "rules: [",
		"unknown level":     "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n",
		"no rules":          "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n",
		"no kind":           "rules:\n- level: Metadata\n",
		"unknown stage":     "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Whenever]\nrules:\n- level: Metadata\n",
		"another API group": "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: Metadata\n",
	}
	for name, policy := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := New(Options{LogPath: filepath.Join(t.TempDir(), "audit.log"), PolicyFile: writeFile(t, "policy.yaml", policy)})
			g.Expect(err).To(MatchError(HavePrefix("--audit-policy-file: ")))
		})
	}
	t.Run("missing file", func(t *testing.T) {
		_, err := New(Options{PolicyFile: filepath.Join(t.TempDir(), "nope.yaml")})
		NewWithT(t).Expect(err).To(MatchError(HavePrefix("--audit-policy-file: ")))
	})
}
