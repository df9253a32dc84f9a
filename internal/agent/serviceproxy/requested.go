package serviceproxy

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
)

// identity is who a request acts as, in the terms of the Kubernetes impersonation headers.
type identity struct {
	user   string
	uid    string
	groups []string
	extra  map[string][]string
}

// identityFrom reads the identity that headers with prefix name (prefix+"User", +"Group", +"Uid", +"Extra-<key>",
// as Kubernetes names them after "Impersonate-"); ok is false when they name none. A group, a UID or an extra without
// a user is an error, as the kube-apiserver's.
func identityFrom(h http.Header, prefix string) (id identity, ok bool, err error) {
	for k, v := range h {
		if !proxyhttp.HasPrefixFold(k, prefix) {
			continue
		}
		ok = true
		switch name := k[len(prefix):]; {
		case strings.EqualFold(name, "User"):
			id.user = v[0]
		case strings.EqualFold(name, "Uid"):
			id.uid = v[0]
		case strings.EqualFold(name, "Group"):
			id.groups = append(id.groups, v...)
		case proxyhttp.HasPrefixFold(name, "Extra-"):
			key, err := url.PathUnescape(strings.ToLower(name[len("Extra-"):]))
			if err != nil {
				return identity{}, true, fmt.Errorf("%s: %w", k, err)
			}
			if id.extra == nil {
				id.extra = map[string][]string{}
			}
			id.extra[key] = append(id.extra[key], v...)
		default:
			return identity{}, true, fmt.Errorf("%s is not an impersonation header", k)
		}
	}
	if ok && id.user == "" {
		return identity{}, true, fmt.Errorf("%sUser is required with the other %s* headers", prefix, prefix)
	}
	return id, ok, nil
}

// headers are the Impersonate-* headers of id.
func (id identity) headers() http.Header {
	h := http.Header{}
	h.Set(impersonateUserHeader, id.user)
	if id.uid != "" {
		h.Set("Impersonate-Uid", id.uid)
	}
	for _, g := range id.groups {
		h.Add(impersonateGroupHeader, g)
	}
	for k, v := range id.extra {
		for _, value := range v {
			h.Add("Impersonate-Extra-"+url.PathEscape(k), value)
		}
	}
	return h
}

// asks are the impersonations want takes, each as the kube-apiserver checks it: the user (or the ServiceAccount it
// names), each group, the UID and each extra value.
func (want identity) asks() []authzv1.ResourceAttributes {
	var out []authzv1.ResourceAttributes
	if ns, name, ok := serviceAccount(want.user); ok {
		out = append(out, authzv1.ResourceAttributes{Verb: "impersonate", Resource: "serviceaccounts", Namespace: ns, Name: name})
	} else {
		out = append(out, authzv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: want.user})
	}
	for _, g := range want.groups {
		out = append(out, authzv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: g})
	}
	if want.uid != "" {
		out = append(out, authzv1.ResourceAttributes{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "uids", Name: want.uid})
	}
	for k, v := range want.extra {
		for _, value := range v {
			out = append(out, authzv1.ResourceAttributes{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras",
				Subresource: k, Name: value})
		}
	}
	return out
}

// mayImpersonate asks the managed cluster's RBAC, with SubjectAccessReviews, whether as may impersonate each part of
// want; denied names the first part it may not, as the kube-apiserver's own message does.
func (p *proxy) mayImpersonate(ctx context.Context, as, want identity) (denied string, err error) {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range as.extra {
		extra[k] = v
	}
	for _, attrs := range want.asks() {
		spec := authzv1.SubjectAccessReviewSpec{User: as.user, UID: as.uid, Groups: as.groups, Extra: extra, ResourceAttributes: &attrs}
		// kubectl --as sends every request of a command with the same headers: each answer is kept for the token TTL.
		key := review.AccessKey(spec)
		allowed, ok := p.impersonations.Get(key)
		if !ok {
			got, err := p.sar.Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			allowed = got.Status.Allowed && !got.Status.Denied
			p.impersonations.Put(key, allowed)
		}
		if !allowed {
			what := attrs.Resource
			if attrs.Subresource != "" {
				what += "/" + attrs.Subresource
			}
			return fmt.Sprintf("%s %q is forbidden: User %q cannot impersonate resource %q in API group %q on this cluster",
				what, attrs.Name, as.user, what, attrs.Group), nil
		}
	}
	return "", nil
}

// serveRequestedImpersonation serves the impersonator's request for a hub user (as) that asked to act as want: as
// want, when the managed cluster's RBAC lets as impersonate all of it, else 403.
func (p *proxy) serveRequestedImpersonation(w http.ResponseWriter, r *http.Request, as, want identity) {
	ctx, cancel := context.WithTimeout(r.Context(), tokenReviewTimeout)
	defer cancel()
	denied, err := p.mayImpersonate(ctx, as, want)
	if err != nil {
		logger.Error(err, "Cannot ask the managed cluster whether a hub user may impersonate", "user", as.user)
		proxyhttp.WriteStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
			"cannot authorize the impersonation with the managed cluster; try again later")
		return
	}
	if denied != "" {
		proxyhttp.WriteStatus(w, http.StatusForbidden, metav1.StatusReasonForbidden, denied)
		return
	}
	p.impersonate(w, r, want.headers())
}

// serviceAccount splits a ServiceAccount's user name, system:serviceaccount:<namespace>:<name>.
func serviceAccount(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != "" && !strings.Contains(name, ":")
}
