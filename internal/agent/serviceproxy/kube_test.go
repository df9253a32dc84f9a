package serviceproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/proxyhttp"
)

const hubUserAlice = "cluster:hub:system:serviceaccount:" + hubNamespace + ":alice"
const hubUserBob = "cluster:hub:system:serviceaccount:" + hubNamespace + ":bob"

// whoAmI asks the managed apiserver, through cs, who it sees.
func whoAmI(ctx context.Context, cs kubernetes.Interface) authnv1.UserInfo {
	GinkgoHelper()
	ssr, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return ssr.Status.UserInfo
}

// rawRequest sends method path to the proxy with headers and returns the status code and the body.
func rawRequest(ctx context.Context, p *proxyUnderTest, method, path string, headers map[string][]string) (int, []byte) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, method, p.url+path, nil)
	Expect(err).NotTo(HaveOccurred())
	for k, v := range headers {
		req.Header[k] = v // as given: non-canonical names reach the wire unchanged
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, body
}

// expectStatus checks body is a Kubernetes Status failure with code and reason.
func expectStatus(body []byte, code int32, reason metav1.StatusReason) metav1.Status {
	GinkgoHelper()
	var st metav1.Status
	Expect(json.Unmarshal(body, &st)).To(Succeed(), "body: %s", body)
	Expect(st.APIVersion).To(Equal("v1"))
	Expect(st.Kind).To(Equal("Status"))
	Expect(st.Status).To(Equal(metav1.StatusFailure))
	Expect(st.Code).To(Equal(code))
	Expect(st.Reason).To(Equal(reason))
	Expect(st.Message).NotTo(BeEmpty())
	return st
}

var _ = Describe("kube-apiserver requests", func() {
	It("passes a managed-cluster token through with that token's own rights", func(ctx SpecContext) {
		p := startProxy(nil)
		reader := p.client(tokenFor(ctx, managedAdmin, teamNamespace, "reader"), rest.ImpersonationConfig{})
		nss, err := reader.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(nss.Items).To(ContainElement(HaveField("Name", teamNamespace)))
		Expect(whoAmI(ctx, reader).Username).To(Equal("system:serviceaccount:team:reader"))

		nobody := p.client(tokenFor(ctx, managedAdmin, teamNamespace, "nobody"), rest.ImpersonationConfig{})
		_, err = nobody.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("system:serviceaccount:team:nobody"))
		Expect(p.hubReviews.Load()).To(BeZero(), "a managed-cluster token needs no hub TokenReview")
	})

	It("impersonates a hub ServiceAccount as cluster:hub:<user> with its groups and the rights the managed cluster grants that user", func(ctx SpecContext) {
		p := startProxy(nil)
		alice := p.client(tokenFor(ctx, hubAdmin, hubNamespace, "alice"), rest.ImpersonationConfig{})
		who := whoAmI(ctx, alice)
		Expect(who.Username).To(Equal(hubUserAlice))
		Expect(who.Groups).To(ConsistOf("system:serviceaccounts", "system:serviceaccounts:"+hubNamespace, "system:authenticated"))
		Expect(who.Extra).To(BeEmpty(), "the hub's user extras name hub objects and are not passed on")
		nss, err := alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred(), "alice's mapped user may list namespaces on the managed cluster")
		Expect(nss.Items).NotTo(BeEmpty())

		bob := p.client(tokenFor(ctx, hubAdmin, hubNamespace, "bob"), rest.ImpersonationConfig{})
		_, err = bob.CoreV1().ConfigMaps(teamNamespace).List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(hubUserBob))

		By("granting the mapped user a Role on the managed cluster")
		_, err = managedAdmin.RbacV1().Roles(teamNamespace).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "bob-configmaps"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"list"}}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = managedAdmin.RbacV1().RoleBindings(teamNamespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "bob-configmaps"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "bob-configmaps"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: hubUserBob}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error {
			_, err := bob.CoreV1().ConfigMaps(teamNamespace).List(ctx, metav1.ListOptions{})
			return err
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		_, err = bob.CoreV1().ConfigMaps(agentNamespace).List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the Role is for namespace team only; got %v", err)
	})

	It("gives a hub token that forges Impersonate-* headers no more than its mapped user", func(ctx SpecContext) {
		p := startProxy(nil)
		bobToken := tokenFor(ctx, hubAdmin, hubNamespace, "bob")
		forger := p.client(bobToken, rest.ImpersonationConfig{
			UserName: "system:admin", Groups: []string{"system:masters"}, UID: "1234",
			Extra: map[string][]string{"scopes": {"everything"}},
		})
		_, err := forger.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "system:masters would be allowed; got %v", err)
		Expect(err.Error()).To(ContainSubstring(hubUserBob))
		who := whoAmI(ctx, forger)
		Expect(who.Username).To(Equal(hubUserBob))
		Expect(who.Groups).NotTo(ContainElement("system:masters"))
		Expect(who.UID).To(BeEmpty())
		Expect(who.Extra).To(BeEmpty())

		By("sending the headers in unusual case")
		code, body := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces/kube-system/secrets", map[string][]string{
			"Authorization":     {"Bearer " + bobToken},
			"impersonate-user":  {"system:admin"},
			"IMPERSONATE-GROUP": {"system:masters"},
		})
		Expect(code).To(Equal(http.StatusForbidden), "body: %s", body)
		Expect(string(body)).To(ContainSubstring(hubUserBob))
	})

	It("leaves a managed token's Impersonate-* headers to the managed apiserver, which checks that token's rights", func(ctx SpecContext) {
		p := startProxy(nil)
		reader := p.client(tokenFor(ctx, managedAdmin, teamNamespace, "reader"), rest.ImpersonationConfig{
			UserName: "system:admin", Groups: []string{"system:masters"},
		})
		_, err := reader.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("cannot impersonate"))

		impersonator := p.client(tokenFor(ctx, managedAdmin, teamNamespace, "impersonator"),
			rest.ImpersonationConfig{UserName: "someone"})
		Expect(whoAmI(ctx, impersonator).Username).To(Equal("someone"), "the headers reach the apiserver unchanged")
	})

	It("answers 401 with a Status when the token is missing or unknown to both clusters", func(ctx SpecContext) {
		p := startProxy(nil)
		for _, auth := range [][]string{nil, {"Bearer not-a-token"}, {"Basic dXNlcjpwYXNz"}, {"Bearer "}} {
			headers := map[string][]string{}
			if auth != nil {
				headers["Authorization"] = auth
			}
			code, body := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces", headers)
			Expect(code).To(Equal(http.StatusUnauthorized), "Authorization %q", auth)
			expectStatus(body, http.StatusUnauthorized, metav1.StatusReasonUnauthorized)
		}

		By("refusing hub tokens when there is no hub")
		noHub := startProxy(func(o *Options) { o.Hub = nil })
		code, body := rawRequest(ctx, noHub, http.MethodGet, "/api/v1/namespaces",
			map[string][]string{"Authorization": {"Bearer " + tokenFor(ctx, hubAdmin, hubNamespace, "alice")}})
		Expect(code).To(Equal(http.StatusUnauthorized))
		expectStatus(body, http.StatusUnauthorized, metav1.StatusReasonUnauthorized)
	})

	It("caches TokenReview results, successes and rejections, for the TTL", func(ctx SpecContext) {
		// The clock moves only when the test moves it: how long the requests take decides nothing.
		clk := clocktesting.NewFakePassiveClock(time.Now())
		p := startProxy(func(o *Options) { o.now = clk.Now })
		get := func(token string) int {
			code, _ := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces",
				map[string][]string{"Authorization": {"Bearer " + token}})
			return code
		}
		reviews := func() []int64 { return []int64{p.managedReviews.Load(), p.hubReviews.Load()} }

		reader := tokenFor(ctx, managedAdmin, teamNamespace, "reader")
		Expect(get(reader)).To(Equal(http.StatusOK))
		Expect(get(reader)).To(Equal(http.StatusOK))
		Expect(reviews()).To(Equal([]int64{1, 0}), "managed, hub")

		alice := tokenFor(ctx, hubAdmin, hubNamespace, "alice")
		Expect(get(alice)).To(Equal(http.StatusOK))
		Expect(get(alice)).To(Equal(http.StatusOK))
		Expect(reviews()).To(Equal([]int64{2, 1}), "a hub token is rejected by the managed cluster, then accepted by the hub, once")

		Expect(get("garbage")).To(Equal(http.StatusUnauthorized))
		Expect(get("garbage")).To(Equal(http.StatusUnauthorized))
		Expect(reviews()).To(Equal([]int64{3, 2}), "rejections are cached too")

		By("asking again once the TTL has passed")
		const ttl = time.Minute
		short := startProxy(func(o *Options) { o.TokenCacheTTL, o.now = ttl, clk.Now })
		getShort := func() int {
			code, _ := rawRequest(ctx, short, http.MethodGet, "/api/v1/namespaces", map[string][]string{"Authorization": {"Bearer " + reader}})
			return code
		}
		Expect(getShort()).To(Equal(http.StatusOK))
		clk.SetTime(clk.Now().Add(ttl - time.Nanosecond))
		Expect(getShort()).To(Equal(http.StatusOK))
		Expect(short.managedReviews.Load()).To(Equal(int64(1)), "kept for the whole TTL")
		clk.SetTime(clk.Now().Add(time.Nanosecond))
		Expect(getShort()).To(Equal(http.StatusOK))
		Expect(short.managedReviews.Load()).To(Equal(int64(2)), "asked again once the TTL has passed")

		By("asking every time when the cache is disabled")
		uncached := startProxy(func(o *Options) { o.TokenCacheTTL = -1 })
		for range 3 {
			code, _ := rawRequest(ctx, uncached, http.MethodGet, "/api/v1/namespaces", map[string][]string{"Authorization": {"Bearer " + reader}})
			Expect(code).To(Equal(http.StatusOK))
		}
		Expect(uncached.managedReviews.Load()).To(Equal(int64(3)))
	})

	It("answers 503, and caches nothing, when a TokenReview cannot be made", func(ctx SpecContext) {
		By("a hub that fails")
		brokenHub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			proxyhttp.WriteStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcd is down")
		}))
		DeferCleanup(brokenHub.Close)
		p := startProxy(func(o *Options) {
			o.Hub = &rest.Config{Host: brokenHub.URL, BearerToken: "x", WrapTransport: o.Hub.WrapTransport}
		})
		alice := tokenFor(ctx, hubAdmin, hubNamespace, "alice")
		for want := int64(1); want <= 2; want++ {
			code, body := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces", map[string][]string{"Authorization": {"Bearer " + alice}})
			Expect(code).To(Equal(http.StatusServiceUnavailable))
			expectStatus(body, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable)
			Expect(p.hubReviews.Load()).To(BeNumerically(">=", want), "the failure was not cached")
		}
		Expect(p.managedReviews.Load()).To(Equal(int64(1)), "the managed cluster's rejection is cached")

		By("an agent that may not create TokenReviews on the managed cluster")
		p = startProxy(func(o *Options) {
			o.Kube.BearerTokenFile = ""
			o.Kube.BearerToken = tokenFor(ctx, managedAdmin, teamNamespace, "nobody")
		})
		reader := tokenFor(ctx, managedAdmin, teamNamespace, "reader")
		for want := int64(1); want <= 2; want++ {
			code, body := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces", map[string][]string{"Authorization": {"Bearer " + reader}})
			Expect(code).To(Equal(http.StatusServiceUnavailable))
			expectStatus(body, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable)
			Expect(p.managedReviews.Load()).To(Equal(want))
		}
		Expect(p.hubReviews.Load()).To(BeZero(), "an infrastructure error stops the chain")
	})

	It("streams a watch as the events happen", func(ctx SpecContext) {
		p := startProxy(nil)
		reader := p.client(tokenFor(ctx, managedAdmin, teamNamespace, "reader"), rest.ImpersonationConfig{})
		w, err := reader.CoreV1().ConfigMaps(teamNamespace).Watch(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(w.Stop)
		for _, name := range []string{"first", "second"} {
			_, err := managedAdmin.CoreV1().ConfigMaps(teamNamespace).Create(ctx,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			// Each event must arrive while the watch is still open, right after the change.
			var ev watch.Event
			Eventually(w.ResultChan()).WithTimeout(5 * time.Second).Should(Receive(&ev))
			Expect(ev.Type).To(Equal(watch.Added))
			Expect(ev.Object).To(HaveField("ObjectMeta.Name", name))
		}
	})
})
