package review

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"
)

// tokenReviewAPI answers TokenReviews as a kube-apiserver does: "real-*" tokens authenticate as themselves, any other
// is rejected. A review of a "slow-*" token waits until release is closed ("slow-real-*" then authenticates).
type tokenReviewAPI struct {
	release chan struct{}
	asked   sync.Map // token -> *atomic.Int32
}

func (a *tokenReviewAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var tr authnv1.TokenReview
	if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n, _ := a.asked.LoadOrStore(tr.Spec.Token, new(atomic.Int32))
	n.(*atomic.Int32).Add(1)
	if strings.HasPrefix(tr.Spec.Token, "slow-") {
		<-a.release
	}
	if strings.Contains(tr.Spec.Token, "real-") {
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: tr.Spec.Token}}
	} else {
		tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&tr)
}

func (a *tokenReviewAPI) times(token string) int32 {
	n, ok := a.asked.Load(token)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

// lanesOn reviews tokens through a tokenReviewAPI at qps and burst, with opts and a clock the test moves (advance).
type lanesOn struct {
	api    *tokenReviewAPI
	tokens *Tokens
	mu     sync.Mutex
	now    time.Time
}

func newLanes(t *testing.T, qps float32, burst int, opts TokensOptions) *lanesOn {
	t.Helper()
	l := &lanesOn{api: &tokenReviewAPI{release: make(chan struct{})}, now: time.Unix(1000, 0)}
	srv := httptest.NewServer(l.api)
	t.Cleanup(srv.Close)
	opts.Now = func() time.Time {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.now
	}
	var err error
	l.tokens, err = NewTokens("hub", &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"},
		QPS: qps, Burst: burst}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (l *lanesOn) advance(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = l.now.Add(d)
}

func TestMadeUpTokensWaitInALaneOfTheirOwnAndNeverQueue(t *testing.T) {
	g := NewWithT(t)
	l := newLanes(t, 1e6, 1e6, TokensOptions{TTL: 10 * time.Second, Concurrency: 2})
	api, tokens := l.api, l.tokens
	ctx := context.Background()

	id, err := tokens.Review(ctx, "real-alice")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(id.Authenticated).To(BeTrue())
	tokens.Vouch("managed-bob") // a token of a managed cluster, which the hub does not know

	// The unknown lane fills with reviews that take their time; one more is refused at once, not queued.
	var inFlight sync.WaitGroup
	for i := range 2 {
		inFlight.Go(func() { _, _ = tokens.Review(ctx, "slow-"+strconv.Itoa(i)) })
	}
	g.Eventually(func() int32 { return api.times("slow-0") + api.times("slow-1") }).Should(BeEquivalentTo(2))
	_, err = tokens.Review(ctx, "junk")
	g.Expect(err).To(MatchError(ErrBusy))

	// The known tokens' answers expire meanwhile: their reviews go through their own lane.
	l.advance(11 * time.Second)
	id, err = tokens.Review(ctx, "real-alice")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(id.Authenticated).To(BeTrue())
	g.Expect(api.times("real-alice")).To(BeEquivalentTo(2))
	id, err = tokens.Review(ctx, "managed-bob")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(id.Authenticated).To(BeFalse(), "the hub does not know it; the managed cluster decides")

	close(api.release)
	inFlight.Wait()

	// A flood of rejections does not push the known tokens' answers out of the cache.
	for i := range MaxCached + 100 {
		_, err := tokens.Review(ctx, "junk-"+strconv.Itoa(i))
		g.Expect(err).NotTo(HaveOccurred())
	}
	for _, token := range []string{"real-alice", "managed-bob"} {
		before := api.times(token)
		_, err := tokens.Review(ctx, token)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(api.times(token)).To(Equal(before), "%s answered from the cache", token)
	}
}

func TestConcurrentReviewsOfOneTokenAreOneReview(t *testing.T) {
	g := NewWithT(t)
	l := newLanes(t, 1e6, 1e6, TokensOptions{TTL: 10 * time.Second, Concurrency: 1})
	api, tokens := l.api, l.tokens
	ctx, cancelFirst := context.WithCancel(context.Background())
	results := make(chan error, 10)
	for i := range 10 {
		callerCtx := context.Background()
		if i == 0 {
			callerCtx = ctx
		}
		go func() {
			id, err := tokens.Review(callerCtx, "slow-real-carol")
			if err == nil && !id.Authenticated {
				err = errors.New("not authenticated")
			}
			results <- err
		}()
	}
	g.Eventually(func() int32 { return api.times("slow-real-carol") }).Should(BeEquivalentTo(1))
	cancelFirst() // the caller that started the review goes away; the others still get its answer
	close(api.release)
	for range 9 {
		g.Eventually(results).Should(Receive(BeNil()), "one review, shared by callers a bound of one would have refused")
	}
	g.Expect(api.times("slow-real-carol")).To(BeEquivalentTo(1))
}

// TestMadeUpTokensBeyondTheUnknownLanesRateAreRefusedAtOnce: the unknown lane's rate (the client's QPS and burst) is
// a budget taken without waiting; beyond it a made-up token is ErrBusy at once, a known token still waits its turn in
// its own lane, and the budget comes back with time.
func TestMadeUpTokensBeyondTheUnknownLanesRateAreRefusedAtOnce(t *testing.T) {
	g := NewWithT(t)
	l := newLanes(t, 1, 3, TokensOptions{TTL: time.Minute, Concurrency: 16})
	api, tokens := l.api, l.tokens
	ctx := context.Background()
	tokens.Vouch("known-real-alice")

	for i := range 3 {
		id, err := tokens.Review(ctx, "junk-"+strconv.Itoa(i))
		g.Expect(err).NotTo(HaveOccurred(), "within the burst")
		g.Expect(id.Authenticated).To(BeFalse())
	}
	_, err := tokens.Review(ctx, "junk-3")
	g.Expect(err).To(MatchError(ErrBusy), "the burst is spent: refused, not queued")
	g.Expect(api.times("junk-3")).To(BeZero(), "no review was made")

	id, err := tokens.Review(ctx, "known-real-alice")
	g.Expect(err).NotTo(HaveOccurred(), "the known lane has a budget of its own")
	g.Expect(id.Authenticated).To(BeTrue())

	l.advance(time.Second)
	_, err = tokens.Review(ctx, "junk-3")
	g.Expect(err).NotTo(HaveOccurred(), "a second later the lane has one review again")
	g.Expect(api.times("junk-3")).To(Equal(int32(1)))
}
