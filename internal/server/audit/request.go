package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

// requestInfos parses a managed kube-apiserver's paths as it does itself.
var requestInfos = &request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// connectSubresources are the pod subresources an upgraded request opens a session of.
var connectSubresources = sets.NewString("exec", "attach", "portforward")

// Long-running requests, as kube-apiserver's BasicLongRunningRequestCheck knows them: only these have a
// ResponseStarted stage.
var (
	longRunningVerbs        = sets.NewString("watch", "proxy")
	longRunningSubresources = sets.NewString("attach", "exec", "proxy", "log", "portforward")
)

// parseRequest is what the managed kube-apiserver makes of method, escapedPath and rawQuery: the verb, and the object
// or the non-resource path. rawQuery should have no credential in it (sanitizeQuery): a query the parser cannot read
// is logged. An upgraded request to exec, attach or portforward is a create whatever its method, as kubectl's SPDY
// POST is, so that one policy rule covers websocket (GET) sessions too; other upgrades keep the verb of their method.
func parseRequest(method, escapedPath, rawQuery string, upgrade bool) *request.RequestInfo {
	path, err := url.PathUnescape(escapedPath)
	if err != nil {
		path = escapedPath
	}
	r := &http.Request{Method: method, URL: &url.URL{Path: path, RawPath: escapedPath, RawQuery: rawQuery}}
	info, err := requestInfos.NewRequestInfo(r)
	if err != nil || info == nil {
		// A path too short for its verb (/api/v1/watch): kube-apiserver answers it 500; here it is not an object.
		info = &request.RequestInfo{Path: path, Verb: strings.ToLower(method)}
	}
	if upgrade && info.IsResourceRequest && info.Verb == "get" && connectSubresources.Has(info.Subresource) {
		info.Verb = "create"
	}
	return info
}

// isUpgrade says h asks to switch protocols (exec, attach, port-forward, websockets).
func isUpgrade(h http.Header) bool {
	return httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade")
}

// longRunning says info is a request kube-apiserver holds open: a watch, a proxy, a log, an exec and the like.
func longRunning(info *request.RequestInfo, upgrade bool) bool {
	return upgrade || info.IsResourceRequest && (longRunningVerbs.Has(info.Verb) || longRunningSubresources.Has(info.Subresource))
}

// hasBearerCredential says h carries a bearer token, in Authorization or in a websocket subprotocol. It reads the
// headers and keeps nothing of them.
func hasBearerCredential(h http.Header) bool {
	if proxyhttp.BearerToken(h) != "" {
		return true
	}
	for _, v := range h.Values("Sec-Websocket-Protocol") {
		if strings.Contains(v, "bearer.authorization.k8s.io.") {
			return true
		}
	}
	return false
}

// credentialParams are query parameter names, or parts of them, that carry a credential: no Kubernetes API parameter
// contains one (continue tokens are "continue"), but clients and services behind a proxy path use them.
var credentialParams = []string{"token", "secret", "password", "passwd", "auth", "apikey", "api_key", "api-key",
	"credential", "signature"}

// credentialParamNames are parameter names that are a credential only as a whole word.
var credentialParamNames = sets.NewString("key", "sig", "pwd", "code")

// sanitizeQuery removes from rawQuery the parameters whose name looks like a credential's (access_token, token,
// id_token, password, …); the others stay exactly as they came, in their order.
func sanitizeQuery(rawQuery string) string {
	if rawQuery == "" {
		return ""
	}
	kept := make([]string, 0, strings.Count(rawQuery, "&")+1)
	removed := false
	for part := range strings.SplitSeq(rawQuery, "&") {
		if part == "" {
			continue
		}
		name, _, _ := strings.Cut(part, "=")
		if unescaped, err := url.QueryUnescape(name); err == nil {
			name = unescaped
		}
		if credentialParam(name) {
			removed = true
			continue
		}
		kept = append(kept, part)
	}
	if !removed {
		return rawQuery
	}
	return strings.Join(kept, "&")
}

func credentialParam(name string) bool {
	name = strings.ToLower(strings.TrimSpace(name))
	if credentialParamNames.Has(name) {
		return true
	}
	for _, p := range credentialParams {
		if strings.Contains(name, p) {
			return true
		}
	}
	return false
}

// requestURI is the event's RequestURI: the path as it came, and the query without credentials.
func requestURI(escapedPath, sanitizedQuery string) string {
	if escapedPath == "" {
		escapedPath = "/"
	}
	if sanitizedQuery == "" {
		return escapedPath
	}
	return escapedPath + "?" + sanitizedQuery
}

// Kubernetes keeps the events' user agents to this, as kube-apiserver does.
const (
	maxUserAgentLength      = 1024
	userAgentTruncateSuffix = "...TRUNCATED"
)

func userAgent(h http.Header) string {
	ua := h.Get("User-Agent")
	if len(ua) > maxUserAgentLength {
		ua = ua[:maxUserAgentLength] + userAgentTruncateSuffix
	}
	return ua
}

// maxAuditIDLength bounds an Audit-ID taken from the hub; kube-apiserver's own are UUIDs (36 characters).
const maxAuditIDLength = 128

// validAuditID says id may name an event: printable ASCII without spaces, as a header value and a log field.
func validAuditID(id string) bool {
	if id == "" || len(id) > maxAuditIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// jsonBody is b compacted to one line (an audit log line must stay one line), when contentType is JSON (application/
// json and the +json patch types) and b is valid JSON of at most MaxRequestBody bytes; otherwise it says why not.
func jsonBody(b []byte, contentType string) ([]byte, string) {
	if len(b) > MaxRequestBody {
		return nil, fmt.Sprintf("omitted: larger than %d bytes", MaxRequestBody)
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil || (mediaType != "application/json" && !strings.HasSuffix(mediaType, "+json")) {
		return nil, "omitted: not JSON"
	}
	var buf bytes.Buffer
	buf.Grow(len(b))
	if err := json.Compact(&buf, b); err != nil {
		return nil, "omitted: not valid JSON"
	}
	return buf.Bytes(), ""
}
