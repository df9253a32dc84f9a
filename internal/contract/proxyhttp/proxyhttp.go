// Package proxyhttp is what the user-server and the proxy-agent's service-proxy agree on: the Cluster-Proxy-* headers
// that address a service, how a bearer token is read, and the Kubernetes Status both answer errors with.
package proxyhttp

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The headers the user-server sets on service requests. Any header starting with HeaderPrefix makes a request a
// service request for the service-proxy.
const (
	HeaderPrefix    = "Cluster-Proxy-"
	HeaderNamespace = "Cluster-Proxy-Namespace"
	HeaderService   = "Cluster-Proxy-Service"
	HeaderPort      = "Cluster-Proxy-Port"
	HeaderProto     = "Cluster-Proxy-Proto"
)

// RequestedImpersonatePrefix starts the headers in which the user-server passes on, to the service-proxy, the
// impersonation a hub user asked for with Impersonate-* headers (Requested-Impersonate-User, -Group, -Uid,
// -Extra-<key>). The service-proxy takes them from the hub's impersonator alone, and lets the managed cluster's RBAC
// decide whether the hub user may impersonate what they name: Impersonate-* itself would be the impersonator's word.
const RequestedImpersonatePrefix = requested + impersonatePrefix

const (
	requested         = "Requested-"
	impersonatePrefix = "Impersonate-" // the Kubernetes impersonation headers'
)

// RequestImpersonation renames h's Impersonate-* headers to Requested-Impersonate-*, whatever their case, after
// removing any Requested-Impersonate-* h came with.
func RequestImpersonation(h http.Header) {
	RemoveHeaderPrefix(h, RequestedImpersonatePrefix)
	for k, v := range h {
		if HasPrefixFold(k, impersonatePrefix) {
			delete(h, k)
			h[http.CanonicalHeaderKey(requested+k)] = v
		}
	}
}

// HeaderTunnel is on every answer of the service-proxy to a service tunnel request: a CONNECT with the headers above,
// for a plain-http service. On 200 its value is the Host the service's requests carry (<name>.<namespace>.<the
// cluster's service domain>:<port>), and the connection then leads to the service itself; on a refusal it is
// TunnelRefused. An answer without it comes from a service-proxy that has no service tunnels.
const (
	HeaderTunnel  = "Cluster-Proxy-Tunnel"
	TunnelRefused = "refused"
)

// BearerToken is the token of an "Authorization: Bearer <token>" header, or "". It is parsed as the kube-apiserver
// parses it, so the token checked is the token the apiserver will see: "Bearer  abc" (two spaces) has none.
func BearerToken(h http.Header) string {
	parts := strings.SplitN(strings.TrimSpace(h.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "Bearer") {
		return ""
	}
	return parts[1]
}

// webSocketBearerPrefix starts the websocket subprotocol in which a browser-like client sends its bearer token, as
// the kube-apiserver reads it (base64url.bearer.authorization.k8s.io.<base64url of the token>).
const webSocketBearerPrefix = "base64url.bearer.authorization.k8s.io."

// TakeWebSocketBearer removes from h the websocket subprotocols that carry a bearer token and returns the token of
// the first ("" when none carries one, or it does not decode). A token there is a credential like Authorization's:
// it must be reviewed like one, and go no further than Authorization would.
func TakeWebSocketBearer(h http.Header) string {
	values := h.Values("Sec-Websocket-Protocol")
	if len(values) == 0 {
		return ""
	}
	token := ""
	var kept []string
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if encoded, ok := strings.CutPrefix(p, webSocketBearerPrefix); ok {
				if raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(encoded, "=")); err == nil && token == "" {
					token = string(raw)
				}
				continue
			}
			if p != "" {
				kept = append(kept, p)
			}
		}
	}
	h.Del("Sec-Websocket-Protocol")
	if len(kept) > 0 {
		h.Set("Sec-Websocket-Protocol", strings.Join(kept, ", "))
	}
	return token
}

// WriteStatus answers with a failure Status as the kube-apiserver does, so kubectl and client-go show the message
// and classify the error.
func WriteStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	body, _ := json.Marshal(&metav1.Status{ // a Status always marshals
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reason,
		Code:     int32(code),
	})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Del("Content-Length")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// HasHeaderPrefix reports whether h has a header whose name starts with prefix, ignoring case.
func HasHeaderPrefix(h http.Header, prefix string) bool {
	for k := range h {
		if HasPrefixFold(k, prefix) {
			return true
		}
	}
	return false
}

// RemoveHeaderPrefix deletes every header whose name starts with prefix, ignoring case.
func RemoveHeaderPrefix(h http.Header, prefix string) {
	for k := range h {
		if HasPrefixFold(k, prefix) {
			delete(h, k)
		}
	}
}

// HasPrefixFold reports whether s starts with prefix, ignoring case.
func HasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
