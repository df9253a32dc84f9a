// Package review authenticates bearer tokens with a cluster's TokenReview API and keeps the answers for a while. The
// agent's service-proxy reviews tokens on its managed cluster, the proxy-server's user-server on the hub.
package review

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
)

// MaxCached bounds a cache, so a flood of distinct garbage tokens cannot grow it without limit.
const MaxCached = 4096

// Identity is the outcome of a TokenReview.
type Identity struct {
	Authenticated bool
	User, UID     string
	Groups        []string
	Extra         map[string][]string
}

// Tokens authenticates tokens with the TokenReview API of one cluster and caches the answers.
type Tokens struct {
	cluster string // for errors: "managed cluster" or "hub"
	client  authnv1client.TokenReviewInterface
	cache   *Cache[Identity] // nil: no caching
}

// NewTokens reviews tokens on cluster (named in errors) through cfg, keeping answers for ttl (0 or less: not at
// all) as now tells the time.
func NewTokens(cluster string, cfg *rest.Config, ttl time.Duration, now func() time.Time) (*Tokens, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		// Every uncached request makes a review; client-go's default of 5 per second would queue them.
		cfg.QPS, cfg.Burst = 50, 100
	}
	c, err := authnv1client.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s TokenReview client: %w", cluster, err)
	}
	return &Tokens{cluster: cluster, client: c.TokenReviews(), cache: NewCache[Identity](ttl, now)}, nil
}

// Review authenticates token. An error means the review could not be made (the caller answers 503) and is never
// cached; a rejection is an Identity with Authenticated false.
func (r *Tokens) Review(ctx context.Context, token string) (Identity, error) {
	key := sha256.Sum256([]byte(token))
	if id, ok := r.cache.Get(key); ok {
		return id, nil
	}
	tr, err := r.client.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("%s TokenReview: %w", r.cluster, err)
	}
	u := tr.Status.User
	id := Identity{Authenticated: tr.Status.Authenticated, User: u.Username, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		id.Extra = make(map[string][]string, len(u.Extra))
		for k, v := range u.Extra {
			id.Extra[k] = v
		}
	}
	if id.Authenticated && id.User == "" {
		return Identity{}, fmt.Errorf("%s TokenReview authenticated a token without a user name", r.cluster)
	}
	// Rejections are cached too. kube-apiserver reports every one with status.error "invalid bearer token", so the
	// error cannot tell an unknown token from a failing authenticator; either way the answer is 401 for a TTL.
	r.cache.Put(key, id)
	return id, nil
}

// Cache keeps answers for a TTL, keyed by a SHA-256 (of a token, so that no token is held). A nil Cache keeps
// nothing.
type Cache[V any] struct {
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cached[V]
}

type cached[V any] struct {
	v       V
	expires time.Time
}

// NewCache returns a cache that keeps entries for ttl, or nil when ttl is not positive.
func NewCache[V any](ttl time.Duration, now func() time.Time) *Cache[V] {
	if ttl <= 0 {
		return nil
	}
	return &Cache[V]{ttl: ttl, now: now, entries: map[[sha256.Size]byte]cached[V]{}}
}

// Get returns the entry for key while it has not expired.
func (c *Cache[V]) Get(key [sha256.Size]byte) (V, bool) {
	var zero V
	if c == nil {
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok {
		return zero, false
	}
	if !c.now().Before(e.expires) {
		delete(c.entries, key)
		return zero, false
	}
	return e.v, true
}

// Put keeps v for key for the TTL. A full cache drops its expired entries, then arbitrary ones.
func (c *Cache[V]) Put(key [sha256.Size]byte, v V) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if len(c.entries) >= MaxCached {
		for k, e := range c.entries {
			if !now.Before(e.expires) {
				delete(c.entries, k)
			}
		}
		// Still full of live entries: drop arbitrary ones (map order is random); they are only asked again.
		for k := range c.entries {
			if len(c.entries) < MaxCached {
				break
			}
			delete(c.entries, k)
		}
	}
	c.entries[key] = cached[V]{v: v, expires: now.Add(c.ttl)}
}

// Len is how many entries the cache holds, expired ones included.
func (c *Cache[V]) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
