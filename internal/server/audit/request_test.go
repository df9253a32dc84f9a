package audit

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestSanitizeQueryRemovesCredentialLookingParameters(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"none":                       {"", ""},
		"nothing to remove":          {"watch=true&resourceVersion=1&continue=eyJ2IjoxfQ%3D%3D", "watch=true&resourceVersion=1&continue=eyJ2IjoxfQ%3D%3D"},
		"access_token":               {"access_token=secret&watch=true", "watch=true"},
		"token alone":                {"token=secret", ""},
		"id_token among others":      {"a=1&id_token=secret&b=2", "a=1&b=2"},
		"escaped name":               {"access%5Ftoken=secret&limit=1", "limit=1"},
		"upper case":                 {"Access_Token=secret&X-Api-Key=secret", ""},
		"password and client secret": {"password=secret&client_secret=secret&user=me", "user=me"},
		"authorization":              {"authorization=Bearer%20secret&pretty=1", "pretty=1"},
		"a bare name":                {"token&watch=1", "watch=1"},
		"signature and key":          {"X-Amz-Signature=secret&key=secret&keyword=k", "keyword=k"},
		"exec command stays":         {"command=ls&command=-l&stdin=true", "command=ls&command=-l&stdin=true"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(sanitizeQuery(c.in)).To(Equal(c.want))
		})
	}
}

func TestParseRequestNamesTheRequestAsTheKubeAPIServerDoes(t *testing.T) {
	cases := map[string]struct {
		method, path, query                 string
		upgrade                             bool
		verb, group, version, resource, sub string
		namespace, name                     string
		resourceRequest                     bool
	}{
		"get":                           {method: "GET", path: "/api/v1/namespaces/ns/pods/p", verb: "get", version: "v1", resource: "pods", namespace: "ns", name: "p", resourceRequest: true},
		"head":                          {method: "HEAD", path: "/api/v1/namespaces/ns/pods/p", verb: "get", version: "v1", resource: "pods", namespace: "ns", name: "p", resourceRequest: true},
		"list cluster-wide":             {method: "GET", path: "/apis/apps/v1/deployments", verb: "list", group: "apps", version: "v1", resource: "deployments", resourceRequest: true},
		"watch by query":                {method: "GET", path: "/api/v1/namespaces/ns/pods", query: "watch=true", verb: "watch", version: "v1", resource: "pods", namespace: "ns", resourceRequest: true},
		"watch=false":                   {method: "GET", path: "/api/v1/namespaces/ns/pods", query: "watch=false", verb: "list", version: "v1", resource: "pods", namespace: "ns", resourceRequest: true},
		"watch by path":                 {method: "GET", path: "/api/v1/watch/namespaces/ns/pods/p", verb: "watch", version: "v1", resource: "pods", namespace: "ns", name: "p", resourceRequest: true},
		"single-object watch":           {method: "GET", path: "/api/v1/namespaces/ns/pods", query: "fieldSelector=metadata.name%3Dp&watch=1", verb: "watch", version: "v1", resource: "pods", namespace: "ns", name: "p", resourceRequest: true},
		"create":                        {method: "POST", path: "/api/v1/namespaces/ns/configmaps", verb: "create", version: "v1", resource: "configmaps", namespace: "ns", resourceRequest: true},
		"update status":                 {method: "PUT", path: "/apis/apps/v1/namespaces/ns/deployments/d/status", verb: "update", group: "apps", version: "v1", resource: "deployments", sub: "status", namespace: "ns", name: "d", resourceRequest: true},
		"patch":                         {method: "PATCH", path: "/api/v1/nodes/n1", verb: "patch", version: "v1", resource: "nodes", name: "n1", resourceRequest: true},
		"delete":                        {method: "DELETE", path: "/api/v1/namespaces/ns/pods/p", verb: "delete", version: "v1", resource: "pods", namespace: "ns", name: "p", resourceRequest: true},
		"deletecollection":              {method: "DELETE", path: "/api/v1/namespaces/ns/pods", verb: "deletecollection", version: "v1", resource: "pods", namespace: "ns", resourceRequest: true},
		"namespace itself":              {method: "GET", path: "/api/v1/namespaces/ns", verb: "get", version: "v1", resource: "namespaces", namespace: "ns", name: "ns", resourceRequest: true},
		"namespace finalize":            {method: "PUT", path: "/api/v1/namespaces/ns/finalize", verb: "update", version: "v1", resource: "namespaces", sub: "finalize", namespace: "ns", name: "ns", resourceRequest: true},
		"websocket exec":                {method: "GET", path: "/api/v1/namespaces/ns/pods/p/exec", upgrade: true, verb: "create", version: "v1", resource: "pods", sub: "exec", namespace: "ns", name: "p", resourceRequest: true},
		"websocket port-forward":        {method: "GET", path: "/api/v1/namespaces/ns/pods/p/portforward", upgrade: true, verb: "create", version: "v1", resource: "pods", sub: "portforward", namespace: "ns", name: "p", resourceRequest: true},
		"log, not upgraded":             {method: "GET", path: "/api/v1/namespaces/ns/pods/p/log", query: "follow=true", verb: "get", version: "v1", resource: "pods", sub: "log", namespace: "ns", name: "p", resourceRequest: true},
		"websocket watch stays a watch": {method: "GET", path: "/api/v1/pods", query: "watch=true", upgrade: true, verb: "watch", version: "v1", resource: "pods", resourceRequest: true},
		"service proxy":                 {method: "GET", path: "/api/v1/namespaces/ns/services/https:web:443/proxy/index.html", verb: "get", version: "v1", resource: "services", sub: "proxy", namespace: "ns", name: "https:web:443", resourceRequest: true},
		"escaped name":                  {method: "GET", path: "/api/v1/namespaces/ns/configmaps/a%3Ab", verb: "get", version: "v1", resource: "configmaps", namespace: "ns", name: "a:b", resourceRequest: true},
		"healthz":                       {method: "GET", path: "/healthz", verb: "get"},
		"openapi":                       {method: "GET", path: "/openapi/v3/apis/apps/v1", verb: "get"},
		"group discovery":               {method: "GET", path: "/apis/apps", verb: "get"},
		"too short for its verb":        {method: "GET", path: "/api/v1/watch", verb: "get"},
		"unknown method on a resource":  {method: "OPTIONS", path: "/api/v1/pods", verb: "", version: "v1", resource: "pods", resourceRequest: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			info := parseRequest(c.method, c.path, c.query, c.upgrade)
			g.Expect(info.Verb).To(Equal(c.verb))
			g.Expect(info.IsResourceRequest).To(Equal(c.resourceRequest))
			g.Expect([]string{info.APIGroup, info.APIVersion, info.Resource, info.Subresource, info.Namespace, info.Name}).
				To(Equal([]string{c.group, c.version, c.resource, c.sub, c.namespace, c.name}))
		})
	}
}

// No credential of the caller reaches an event, in the log or at the webhook: not the Authorization header, not a
// token in a websocket subprotocol, not one in the query; and the webhook's own token stays on its connection.
func TestNoCredentialReachesAnEvent(t *testing.T) {
	g := NewWithT(t)
	cert, caPEM := loopbackCert(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	rcv := &receiver{}
	serveTLS(t, ln, cert, rcv)
	path := filepath.Join(t.TempDir(), "audit.log")
	policy := writeFile(t, "policy.yaml", "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n")
	a := startAuditor(t, Options{
		LogPath: path, PolicyFile: policy, WebhookKubeconfig: writeKubeconfig(t, ln.Addr().String(), caPEM),
		WebhookMode: ModeBlocking,
	})

	header := http.Header{
		"Authorization":          {"Bearer secret"},
		"Sec-Websocket-Protocol": {"base64url.bearer.authorization.k8s.io.c2VjcmV0, v5.channel.k8s.io"},
		"Cookie":                 {"session=secret"},
		"Impersonate-User":       {"secret"},
		"Proxy-Authorization":    {"Basic c2VjcmV0OnNlY3JldA=="},
		"Connection":             {"Upgrade"},
		"Upgrade":                {"websocket"},
		"User-Agent":             {"kubectl/v1.37.0"},
	}
	r := Request{
		Via: "user-server", Cluster: "cluster-a", Method: http.MethodGet,
		EscapedPath: "/api/v1/namespaces/default/pods/nginx/exec",
		RawQuery:    "command=sh&access_token=secret&stdin=true&token=secret&id_token=secret",
		Header:      header, SourceIPs: []string{"10.0.0.7"},
	}
	e := a.Begin(r)
	e.RequestBody([]byte(`{"kind":"Status"}`), "application/json")
	e.Started(http.StatusSwitchingProtocols, time.Time{})
	e.Complete(http.StatusSwitchingProtocols, 4096, time.Time{})
	hubUser := a.Begin(getPod("nginx"))
	hubUser.Complete(200, 1, time.Time{})

	logged, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	events := decodeEvents(g, logged)
	g.Expect(byID(events, e.ID())).To(HaveLen(3), "RequestReceived, ResponseStarted, ResponseComplete")
	for _, ev := range byID(events, e.ID()) {
		g.Expect(ev.RequestURI).To(Equal("/api/v1/namespaces/default/pods/nginx/exec?command=sh&stdin=true"))
		g.Expect(ev.Annotations).To(HaveKeyWithValue(AnnotationIdentity, IdentityClusterToken))
	}
	rcv.mu.Lock()
	sent := bytes.Join(rcv.bodies, []byte("\n"))
	auth := rcv.auth
	rcv.mu.Unlock()
	g.Expect(rcv.ids()).To(ContainElements(e.ID(), hubUser.ID()))
	g.Expect(auth).To(HaveEach("Bearer "+webhookCredential), "the kubeconfig's token authenticates to the webhook")
	for name, data := range map[string][]byte{"log": logged, "webhook": sent} {
		for _, secret := range []string{"secret", "c2VjcmV0", webhookCredential} {
			g.Expect(bytes.Contains(data, []byte(secret))).To(BeFalse(), "%q in the %s sink's events", secret, name)
		}
	}
}
