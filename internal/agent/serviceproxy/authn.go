package serviceproxy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
)

const (
	impersonateHeaderPrefix = "Impersonate-"
	// hubServiceAccountPrefix marks hub ServiceAccount users; on the managed cluster they get hubUserPrefix in front
	// so they can never be taken for the managed cluster's own ServiceAccounts.
	hubServiceAccountPrefix = "system:serviceaccount:"
	hubUserPrefix           = "cluster:hub:"
	// maxCachedReviews bounds the cache, so a flood of distinct garbage tokens cannot grow it without limit.
	maxCachedReviews = 4096
)

// identity is the outcome of a TokenReview.
type identity struct {
	authenticated bool
	user          string
	groups        []string
}

// reviewer authenticates tokens with the TokenReview API of one cluster and caches the answers.
type reviewer struct {
	cluster string // for errors: "managed cluster" or "hub"
	client  authnv1client.TokenReviewInterface
	cache   *reviewCache // nil: no caching
}

func newReviewer(cluster string, cfg *rest.Config, ttl time.Duration, now func() time.Time) (*reviewer, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		// Every uncached request makes a review; client-go's default of 5 per second would queue them.
		cfg.QPS, cfg.Burst = 50, 100
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "cluster-proxy-service-proxy"
	}
	c, err := authnv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("serviceproxy: %s TokenReview client: %w", cluster, err)
	}
	r := &reviewer{cluster: cluster, client: c.TokenReviews()}
	if ttl > 0 {
		r.cache = newReviewCache(ttl, now)
	}
	return r, nil
}

// review authenticates token. An error means the review could not be made (the caller answers 503) and is never
// cached; a rejection is an identity with authenticated false.
func (r *reviewer) review(ctx context.Context, token string) (identity, error) {
	key := sha256.Sum256([]byte(token))
	if id, ok := r.cache.get(key); ok {
		return id, nil
	}
	tr, err := r.client.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return identity{}, fmt.Errorf("%s TokenReview: %w", r.cluster, err)
	}
	id := identity{authenticated: tr.Status.Authenticated, user: tr.Status.User.Username, groups: tr.Status.User.Groups}
	if id.authenticated && id.user == "" {
		return identity{}, fmt.Errorf("%s TokenReview authenticated a token without a user name", r.cluster)
	}
	// Rejections are cached too. kube-apiserver reports every one with status.error "invalid bearer token", so the
	// error cannot tell an unknown token from a failing authenticator; either way the answer is 401 for a TTL.
	r.cache.put(key, id)
	return id, nil
}

// reviewCache keeps TokenReview results for a while, keyed by the SHA-256 of the token so that no token is held.
type reviewCache struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cachedReview
}

type cachedReview struct {
	id      identity
	expires time.Time
}

func newReviewCache(ttl time.Duration, now func() time.Time) *reviewCache {
	return &reviewCache{ttl: ttl, now: now, entries: map[[sha256.Size]byte]cachedReview{}}
}

func (c *reviewCache) get(key [sha256.Size]byte) (identity, bool) {
	if c == nil {
		return identity{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return identity{}, false
	}
	if !c.now().Before(e.expires) {
		delete(c.entries, key)
		return identity{}, false
	}
	return e.id, true
}

func (c *reviewCache) put(key [sha256.Size]byte, id identity) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.entries) >= maxCachedReviews {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		// Still full of live entries: drop arbitrary ones (map order is random); they are only asked again.
		for k := range c.entries {
			if len(c.entries) < maxCachedReviews {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[key] = cachedReview{id: id, expires: now.Add(c.ttl)}
}

// impersonation turns a request into one the agent makes on behalf of a hub identity.
type impersonation struct {
	user          string
	groups        []string
	authorization string // the agent's credential, "Bearer <token>"
}

// apply removes every Impersonate-* header the caller sent, whatever its case, so a forged one cannot add rights,
// then sets the hub identity and the agent's credential. The hub's user extras (pod name, node name, credential id of
// hub ServiceAccount tokens) name objects of the hub, not of this cluster, so none is passed on.
func (i *impersonation) apply(h http.Header) {
	removeHeaderPrefix(h, impersonateHeaderPrefix)
	h.Set("Authorization", i.authorization)
	h.Set("Impersonate-User", i.user)
	for _, g := range i.groups {
		h.Add("Impersonate-Group", g)
	}
}

// managedUserName is the user a hub user becomes on the managed cluster.
func managedUserName(hubUser string) string {
	if strings.HasPrefix(hubUser, hubServiceAccountPrefix) {
		return hubUserPrefix + hubUser
	}
	return hubUser
}

// impersonatedGroups are the hub groups to impersonate: all but system:authenticated, which the managed apiserver adds
// to every impersonated user itself.
func impersonatedGroups(hubGroups []string) []string {
	out := make([]string, 0, len(hubGroups))
	for _, g := range hubGroups {
		if g != "system:authenticated" && g != "" {
			out = append(out, g)
		}
	}
	return out
}

// hasHeaderPrefix reports whether h has a header whose name starts with prefix, ignoring case.
func hasHeaderPrefix(h http.Header, prefix string) bool {
	for k := range h {
		if hasPrefixFold(k, prefix) {
			return true
		}
	}
	return false
}

// removeHeaderPrefix deletes every header whose name starts with prefix, ignoring case.
func removeHeaderPrefix(h http.Header, prefix string) {
	for k := range h {
		if hasPrefixFold(k, prefix) {
			delete(h, k)
		}
	}
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
