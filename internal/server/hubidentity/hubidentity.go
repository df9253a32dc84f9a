// Package hubidentity is how the hub side turns a hub user into a request on a managed cluster: who the user is (a
// hub TokenReview, or the identity the hub kube-apiserver's front proxy vouches for), whether the hub lets them reach
// that cluster (a SubjectAccessReview for clusters/proxy with the cluster's name), and the name they carry there as
// impersonation. The credential that proved who they are never goes further than the hub.
package hubidentity

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authzv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
)

// The resource hub RBAC names to let a user reach a cluster: verb (from the HTTP method) on clusters/proxy of this
// group, with the cluster's name as resourceName. The aggregated API serves it; the user-server checks the same rule.
const (
	Group       = "gateway.proxy.open-cluster-management.io"
	Resource    = "clusters"
	Subresource = "proxy"
)

const (
	// hubServiceAccountPrefix marks hub ServiceAccount users; by default they get serviceAccountPrefix in front on a
	// managed cluster, so they can never be taken for the cluster's own ServiceAccounts.
	hubServiceAccountPrefix = "system:serviceaccount:"
	serviceAccountPrefix    = "cluster:hub:"
	// systemAuthenticated is added to every user by the apiserver that authenticates it; it is not impersonated.
	systemAuthenticated = "system:authenticated"
	// serviceAccountsGroup is the group of every ServiceAccount, and with ":<namespace>" of those of a namespace.
	serviceAccountsGroup = "system:serviceaccounts"
	// defaultTTL is how long review answers are kept, as an aggregated API server's delegated authorizer keeps them.
	defaultTTL = 10 * time.Second
)

// Identity is a hub user as the hub authenticated them.
type Identity struct {
	User, UID string
	Groups    []string
	Extra     map[string][]string
}

// Mapping names hub users and groups on the managed clusters. The zero value: a hub ServiceAccount becomes
// cluster:hub:system:serviceaccount:<ns>:<name> and its groups cluster:hub:system:serviceaccounts[:<ns>], every other
// user and group keeps its name (the existing add-on's names, but for the ServiceAccount groups, which it sent as they
// are: UnprefixedServiceAccountGroups). With Prefix set, every user and group gets Prefix in front instead.
type Mapping struct {
	Prefix string
	// UnprefixedServiceAccountGroups sends the groups of hub ServiceAccounts as they are, as the existing add-on
	// does; a hub ServiceAccount of namespace ns then takes the managed cluster's bindings of system:serviceaccounts:ns.
	UnprefixedServiceAccountGroups bool
}

// Impersonation is who id acts as on a managed cluster.
func (m Mapping) Impersonation(id Identity) transport.ImpersonationConfig {
	c := transport.ImpersonationConfig{UserName: m.user(id.User), UID: id.UID}
	for _, g := range id.Groups {
		if g == "" || g == systemAuthenticated {
			continue
		}
		c.Groups = append(c.Groups, m.group(g))
	}
	if len(id.Extra) > 0 {
		c.Extra = make(map[string][]string, len(id.Extra))
		for k, v := range id.Extra {
			c.Extra[k] = v
		}
	}
	return c
}

func (m Mapping) group(name string) string {
	switch {
	case m.Prefix != "":
		return m.Prefix + name
	case !m.UnprefixedServiceAccountGroups && (name == serviceAccountsGroup || strings.HasPrefix(name, serviceAccountsGroup+":")):
		return serviceAccountPrefix + name
	}
	return name
}

func (m Mapping) user(name string) string {
	if m.Prefix != "" {
		return m.Prefix + name
	}
	if strings.HasPrefix(name, hubServiceAccountPrefix) {
		return serviceAccountPrefix + name
	}
	return name
}

// Impersonate is a RoundTripper that sends each request as the identity its context carries (WithIdentity); a
// request without one goes as it is.
func Impersonate(m Mapping, next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		id, ok := FromContext(r.Context())
		if !ok {
			return next.RoundTrip(r)
		}
		return transport.NewImpersonatingRoundTripper(m.Impersonation(id), next).RoundTrip(r)
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type identityKey struct{}

// WithIdentity returns ctx carrying id, the hub user a request is made for.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the hub user a request is made for, if any.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// RequestVerb is the authorization verb of a request on clusters/proxy: create for a connection upgrade (exec,
// attach, port-forward over SPDY or websockets, whose websocket form is a GET), which opens a stream into the cluster
// rather than reading it, else Verb of its method.
func RequestVerb(r *http.Request) string {
	if httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade") {
		return "create"
	}
	return Verb(r.Method)
}

// Verb is the authorization verb of an HTTP method on clusters/proxy, as the Kubernetes API server names it for a
// request to a subresource.
func Verb(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	case http.MethodGet, http.MethodHead:
		return "get"
	}
	return strings.ToLower(method)
}

// Reviewer asks the hub who a token belongs to and whether a hub user may reach a cluster, and keeps the answers
// for a while.
type Reviewer struct {
	tokens    *review.Tokens
	sar       authzv1client.SubjectAccessReviewInterface
	decisions *review.Cache[Decision]
}

// ClusterAuthorizer answers whether a hub identity may verb clusters/proxy of a cluster (*Reviewer).
type ClusterAuthorizer interface {
	Authorize(ctx context.Context, id Identity, cluster, verb string) (Decision, error)
}

// Denied words the hub's refusal of user to verb clusters/proxy of cluster as the kube-apiserver words a forbidden
// request, with the authorizer's reason when it gave one.
func Denied(user, verb, cluster, reason string) string {
	msg := fmt.Sprintf("User %q cannot %s resource \"%s/%s\" in API group %q for cluster %q on the hub",
		user, verb, Resource, Subresource, Group, cluster)
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}

// Decision is the hub's answer to whether a user may reach a cluster.
type Decision struct {
	Allowed bool
	Reason  string // the authorizer's, when it gave one
}

// ReviewerOptions tune a Reviewer; zero values take the defaults.
type ReviewerOptions struct {
	// TTL is how long answers are kept, default 10s; negative keeps none.
	TTL time.Duration
	// Now tells the time for the caches, default time.Now.
	Now func() time.Time
	// TokenReviewConcurrency bounds the TokenReviews in flight per lane (review.Tokens), default
	// review.DefaultConcurrency; beyond it Authenticate fails with review.ErrBusy at once.
	TokenReviewConcurrency int
}

// NewReviewer reviews on the hub cfg reaches (the proxy-server's own identity, which may create TokenReviews and
// SubjectAccessReviews).
func NewReviewer(cfg *rest.Config, opts ReviewerOptions) (*Reviewer, error) {
	if opts.TTL == 0 {
		opts.TTL = defaultTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "cluster-proxy-user-server"
	}
	tokens, err := review.NewTokens("hub", cfg, review.TokensOptions{TTL: opts.TTL, Now: opts.Now, Concurrency: opts.TokenReviewConcurrency})
	if err != nil {
		return nil, err
	}
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 50, 100
	}
	authz, err := authzv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub SubjectAccessReview client: %w", err)
	}
	return &Reviewer{tokens: tokens, sar: authz.SubjectAccessReviews(), decisions: review.NewCache[Decision](opts.TTL, opts.Now)}, nil
}

// Authenticate reviews token on the hub: ok is false when the hub does not know it. An error means the hub could not
// be asked.
func (r *Reviewer) Authenticate(ctx context.Context, token string) (id Identity, ok bool, err error) {
	got, err := r.tokens.Review(ctx, token)
	if err != nil || !got.Authenticated {
		return Identity{}, false, err
	}
	return Identity{User: got.User, UID: got.UID, Groups: got.Groups, Extra: got.Extra}, true, nil
}

// Vouch tells the reviewer that token, which the hub does not know, is real elsewhere (a managed cluster accepted it),
// so that its next review on the hub does not wait behind made-up tokens.
func (r *Reviewer) Vouch(token string) { r.tokens.Vouch(token) }

// Authorize asks the hub whether id may verb clusters/proxy of cluster.
func (r *Reviewer) Authorize(ctx context.Context, id Identity, cluster, verb string) (Decision, error) {
	spec := specFor(id, cluster, verb)
	key := review.AccessKey(spec)
	if d, ok := r.decisions.Get(key); ok {
		return d, nil
	}
	sar, err := r.sar.Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return Decision{}, fmt.Errorf("hub SubjectAccessReview: %w", err)
	}
	d := Decision{Allowed: sar.Status.Allowed && !sar.Status.Denied, Reason: sar.Status.Reason}
	r.decisions.Put(key, d)
	return d, nil
}

// specFor is the SubjectAccessReview of id doing verb on clusters/proxy of cluster.
func specFor(id Identity, cluster, verb string) authzv1.SubjectAccessReviewSpec {
	spec := authzv1.SubjectAccessReviewSpec{
		User: id.User, UID: id.UID, Groups: id.Groups,
		ResourceAttributes: &authzv1.ResourceAttributes{
			Group: Group, Version: "v1alpha1", Resource: Resource, Subresource: Subresource, Name: cluster, Verb: verb,
		},
	}
	if len(id.Extra) > 0 {
		spec.Extra = make(map[string]authzv1.ExtraValue, len(id.Extra))
		for k, v := range id.Extra {
			spec.Extra[k] = v
		}
	}
	return spec
}
