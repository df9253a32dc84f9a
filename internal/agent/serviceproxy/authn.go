package serviceproxy

import (
	"net/http"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

const (
	impersonateHeaderPrefix = "Impersonate-"
	impersonateUserHeader   = "Impersonate-User"
	impersonateGroupHeader  = "Impersonate-Group"
)

// impersonation turns a request into one the agent makes on behalf of another identity.
type impersonation struct {
	headers       http.Header // Impersonate-User, -Group, -Extra-*, -Uid
	authorization string      // the agent's credential, "Bearer <token>"
}

// apply removes every Impersonate-* header the request carries, whatever its case, and its credential, then sets the
// identity and the agent's credential.
func (i *impersonation) apply(h http.Header) {
	proxyhttp.RemoveHeaderPrefix(h, impersonateHeaderPrefix)
	h.Set("Authorization", i.authorization)
	for k, v := range i.headers {
		h[k] = v
	}
}

// impersonatedGroups are the groups to impersonate: all but system:authenticated, which the managed apiserver adds to
// every impersonated user itself.
func impersonatedGroups(hubGroups []string) []string {
	out := make([]string, 0, len(hubGroups))
	for _, g := range hubGroups {
		if g != "system:authenticated" && g != "" {
			out = append(out, g)
		}
	}
	return out
}
