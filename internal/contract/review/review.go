// Package review authenticates bearer tokens with a cluster's TokenReview API and keeps the answers for a while. The
// agent's service-proxy reviews tokens on its managed cluster, the proxy-server's user-server on the hub.
package review

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
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
//
// A caller can send any number of made-up tokens, each a review, and must not starve the callers whose tokens are
// real. Tokens are therefore reviewed in two lanes, each with its own client (and client-go rate limit) and its own
// bound on reviews in flight: the known lane, for tokens that authenticated before or that a caller vouched for
// (Vouch: the managed cluster accepted a token the hub does not know), and the unknown lane for every other one. A
// review of the unknown lane beyond its bound is not queued: Review returns ErrBusy at once (the callers answer 429
// with Retry-After), so a flood costs its senders and leaves the known lane alone; a review of the known lane waits
// for its turn, as only real tokens get there. Concurrent reviews of one token are one review. Answers about known
// tokens are cached apart from the others, so that a flood of rejections cannot push them out.
type Tokens struct {
	cluster string // for errors: "managed cluster" or "hub"
	lanes   [2]lane
	// cache holds the answers about known tokens, junk the answers about the others (rejections, nearly all).
	cache, junk *Cache[Identity] // nil: no caching
	// known remembers the tokens of the known lane for knownFor, so that their next review, once their cached answer
	// has expired, goes there too.
	known *Cache[struct{}]
	// inFlight joins the concurrent reviews of one token (64 clients of one program, when its answer expires).
	inFlight singleflight.Group
}

type lane struct {
	client authnv1client.TokenReviewInterface
	slots  chan struct{}
	name   string
	// budget, in the unknown lane, is its rate of reviews, taken without waiting (client-go's own limiter, which
	// waits, is off there); nil in the known lane, whose client waits in client-go's limiter.
	budget flowcontrol.RateLimiter
}

const (
	laneKnown = iota
	laneUnknown
)

// sharedReviewTimeout bounds a review that concurrent callers share.
const sharedReviewTimeout = 10 * time.Second

// knownFor is how long a token that authenticated, or was vouched for, stays in the known lane.
const knownFor = time.Hour

// DefaultConcurrency is how many reviews of each lane may be in flight at once.
const DefaultConcurrency = 16

// ErrBusy says a review was not made because as many reviews of its lane as allowed are in flight.
var ErrBusy = errors.New("too many token reviews in flight; try again in a moment")

// TokensOptions tune NewTokens; zero values take the defaults.
type TokensOptions struct {
	// TTL is how long answers are kept; 0 or less keeps none.
	TTL time.Duration
	// Now tells the time, default time.Now.
	Now func() time.Time
	// Concurrency bounds the reviews in flight in each lane, default DefaultConcurrency.
	Concurrency int
}

// NewTokens reviews tokens on cluster (named in errors) through cfg.
func NewTokens(cluster string, cfg *rest.Config, opts TokensOptions) (*Tokens, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	r := &Tokens{cluster: cluster, cache: NewCache[Identity](opts.TTL, opts.Now), junk: NewCache[Identity](opts.TTL, opts.Now),
		known: NewCache[struct{}](knownFor, opts.Now)}
	for i, name := range []string{"known", "unknown"} {
		laneCfg := rest.CopyConfig(cfg)
		if laneCfg.QPS == 0 {
			// Every uncached request makes a review; client-go's default of 5 per second would queue them.
			laneCfg.QPS, laneCfg.Burst = 50, 100
		}
		var budget flowcontrol.RateLimiter
		if i == laneUnknown {
			// A made-up token beyond the lane's rate is refused at once, like one beyond its bound in flight: waiting
			// in client-go's limiter would hold a slot and queue the flood after all.
			budget = flowcontrol.NewTokenBucketRateLimiterWithClock(laneCfg.QPS, laneCfg.Burst, nowClock(opts.Now))
			laneCfg.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()
		}
		c, err := authnv1client.NewForConfig(laneCfg)
		if err != nil {
			return nil, fmt.Errorf("%s TokenReview client: %w", cluster, err)
		}
		r.lanes[i] = lane{client: c.TokenReviews(), slots: make(chan struct{}, opts.Concurrency), name: name, budget: budget}
		refusals.WithLabelValues(name)
	}
	return r, nil
}

// tryAdmit takes a slot of the unknown lane and a review of its budget, without waiting for either; false when one of
// them is spent (the slot is not held then).
func (l *lane) tryAdmit() bool {
	select {
	case l.slots <- struct{}{}:
	default:
		return false
	}
	if !l.budget.TryAccept() {
		<-l.slots
		return false
	}
	return true
}

// nowClock is TokensOptions.Now as the clock of the unknown lane's budget, which is only asked TryAccept: it never
// sleeps.
type nowClock func() time.Time

func (c nowClock) Now() time.Time                  { return c() }
func (c nowClock) Since(t time.Time) time.Duration { return c().Sub(t) }
func (nowClock) Sleep(d time.Duration)             { time.Sleep(d) }

// Vouch puts token in the known lane: something other than this cluster's TokenReview showed that it is real (the
// managed cluster accepted a token the hub does not know).
func (r *Tokens) Vouch(token string) {
	r.known.Put(sha256.Sum256([]byte(token)), struct{}{})
}

// Review authenticates token. An error means the review could not be made (the caller answers 503, or 429 for
// ErrBusy) and is never cached; a rejection is an Identity with Authenticated false.
func (r *Tokens) Review(ctx context.Context, token string) (Identity, error) {
	key := sha256.Sum256([]byte(token))
	if id, ok := r.cache.Get(key); ok {
		return id, nil
	}
	if id, ok := r.junk.Get(key); ok {
		return id, nil
	}
	// The callers share the review, so no one of them may end it: it has a bound of its own.
	v, err, _ := r.inFlight.Do(string(key[:]), func() (any, error) {
		shared, cancel := context.WithTimeout(context.WithoutCancel(ctx), sharedReviewTimeout)
		defer cancel()
		return r.review(shared, key, token)
	})
	if err != nil {
		return Identity{}, err
	}
	return v.(Identity), nil
}

// review makes the TokenReview of token (key its SHA-256) in its lane and caches the answer.
func (r *Tokens) review(ctx context.Context, key [sha256.Size]byte, token string) (Identity, error) {
	l := &r.lanes[laneUnknown]
	if _, known := r.known.Get(key); known {
		l = &r.lanes[laneKnown]
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return Identity{}, fmt.Errorf("%s TokenReview: %w", r.cluster, ctx.Err())
		}
	} else if !l.tryAdmit() {
		refusals.WithLabelValues(l.name).Inc()
		return Identity{}, fmt.Errorf("%s TokenReview: %w", r.cluster, ErrBusy)
	}
	tr, err := l.client.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	<-l.slots
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
	switch {
	case id.Authenticated:
		r.known.Put(key, struct{}{})
		r.cache.Put(key, id)
	case l == &r.lanes[laneKnown]:
		r.cache.Put(key, id) // a vouched token the cluster does not know: kept apart from the junk too
	default:
		r.junk.Put(key, id)
	}
	return id, nil
}

// refusals counts the reviews ErrBusy refused, by lane. Each program registers it where it serves metrics.
var refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "cluster_proxy_token_reviews_refused_total",
	Help: "TokenReviews of tokens not known to authenticate that were not made because as many of them were in flight, or their lane's rate was spent; the request was answered 429.",
}, []string{"lane"})

// Collector is the package's metrics.
func Collector() prometheus.Collector { return refusals }

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

// AccessKey is the cache key of a SubjectAccessReview: a hash of everything its answer depends on, with the groups in
// a fixed order (encoding/json writes map keys sorted, so equal specs give equal bytes).
func AccessKey(spec authzv1.SubjectAccessReviewSpec) [sha256.Size]byte {
	groups := append([]string(nil), spec.Groups...)
	sort.Strings(groups)
	spec.Groups = groups
	raw, _ := json.Marshal(spec)
	return sha256.Sum256(raw)
}
