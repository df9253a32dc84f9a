package serviceproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
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

// withHeaders is a clientset of cfg whose requests carry headers too.
func withHeaders(cfg *rest.Config, headers map[string][]string) kubernetes.Interface {
	GinkgoHelper()
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			for k, v := range headers {
				r.Header[k] = v
			}
			return rt.RoundTrip(r)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	return cs
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
	})

	It("serves the hub's impersonator as the identity its headers name, with the rights the managed cluster grants it", func(ctx SpecContext) {
		p := startProxy(nil)
		alice := p.tlsClient(impersonatorPair, rest.ImpersonationConfig{
			UserName: hubUserAlice, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + hubNamespace},
			Extra: map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1234"}},
		})
		who := whoAmI(ctx, alice)
		Expect(who.Username).To(Equal(hubUserAlice))
		Expect(who.Groups).To(ConsistOf("system:serviceaccounts", "system:serviceaccounts:"+hubNamespace, "system:authenticated"))
		Expect(who.Extra).To(HaveKeyWithValue("authentication.kubernetes.io/credential-id", authnv1.ExtraValue{"JTI=1234"}))
		nss, err := alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred(), "alice's mapped user may list namespaces on the managed cluster")
		Expect(nss.Items).NotTo(BeEmpty())
		Expect(p.managedReviews.Load()).To(BeZero(), "the impersonator's requests carry no token to review")

		bob := p.tlsClient(impersonatorPair, rest.ImpersonationConfig{UserName: hubUserBob})
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

	It("serves Impersonate-* only from the impersonator's certificate, or with a token the cluster then authorizes them for", func(ctx SpecContext) {
		p := startProxy(nil)
		admin := rest.ImpersonationConfig{UserName: "system:admin", Groups: []string{"system:masters"}}
		reader := tokenFor(ctx, managedAdmin, teamNamespace, "reader")

		By("a managed-cluster token whose ServiceAccount may not impersonate: the kube-apiserver refuses")
		_, err := p.client(reader, admin).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("cannot impersonate"))

		By("another certificate of the same CA (a proxy client's)")
		_, err = p.tlsClient(proxyClientPair, admin).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("impersonator certificate"))

		By("the impersonator's name from the signer's CA without the role URI the operator alone issues")
		_, err = p.tlsClient(namedImpersonator, admin).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("impersonator certificate"))

		By("TLS without a client certificate")
		_, err = p.tlsClient(nil, admin).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)

		By("the headers in unusual case, without a token")
		code, body := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces/kube-system/secrets", map[string][]string{
			"impersonate-user":  {"system:admin"},
			"IMPERSONATE-GROUP": {"system:masters"},
		})
		Expect(code).To(Equal(http.StatusForbidden), "body: %s", body)
		expectStatus(body, http.StatusForbidden, metav1.StatusReasonForbidden)

		By("a token that may impersonate someone: as the cluster's RBAC allows, and no further")
		impersonator := tokenFor(ctx, managedAdmin, teamNamespace, "impersonator")
		Expect(whoAmI(ctx, p.client(impersonator, rest.ImpersonationConfig{UserName: "someone"})).Username).To(Equal("someone"))
		_, err = p.client(impersonator, rest.ImpersonationConfig{UserName: "someone-else"}).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)

		By("a Requested-Impersonate-* header from anyone but the impersonator: dropped")
		asked := withHeaders(&rest.Config{Host: p.url, BearerToken: impersonator}, map[string][]string{"Requested-Impersonate-User": {"someone"}})
		Expect(whoAmI(ctx, asked).Username).To(Equal("system:serviceaccount:" + teamNamespace + ":impersonator"))

		By("the impersonator's name from a CA the proxy does not trust: the handshake fails")
		_, err = p.tlsClient(foreignImpersonator, admin).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(err).To(HaveOccurred())
		Expect(apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)).To(BeFalse(), "no HTTP answer at all; got %v", err)
		Expect(err.Error()).To(ContainSubstring("tls"))
		Expect(p.managedReviews.Load()).To(BeEquivalentTo(2), "the two tokens, each reviewed once; nothing a certificate sent")
	})

	It("lets a hub user act as whom the managed cluster's RBAC lets it impersonate, and no one else", func(ctx SpecContext) {
		clk := clocktesting.NewFakePassiveClock(time.Now())
		p := startProxy(func(o *Options) { o.now = clk.Now })
		// The user-server's request for a hub user that asked to act as someone else.
		asking := func(user string, groups []string, headers map[string][]string) kubernetes.Interface {
			return withHeaders(&rest.Config{Host: p.tlsURL, Impersonate: rest.ImpersonationConfig{UserName: user, Groups: groups},
				TLSClientConfig: rest.TLSClientConfig{Insecure: true, CertData: impersonatorPair.CertPEM, KeyData: impersonatorPair.KeyPEM}}, headers)
		}
		someone := map[string][]string{"Requested-Impersonate-User": {"someone"}}
		aliceGroups := []string{"system:serviceaccounts", "system:serviceaccounts:" + hubNamespace}

		By("before the cluster grants it: refused, naming the hub user; asked once for the token TTL")
		_, err := asking(hubUserAlice, aliceGroups, someone).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(`User "` + hubUserAlice + `" cannot impersonate resource "users"`))
		_, err = asking(hubUserAlice, aliceGroups, someone).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(p.accessReviews.Load()).To(BeEquivalentTo(1), "the second request took the first one's answer")

		By("the cluster lets alice's mapped user impersonate the user someone")
		_, err = managedAdmin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "alice-impersonates-someone"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "impersonate-someone"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: hubUserAlice}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(managedAdmin.RbacV1().ClusterRoleBindings().Delete(ctx, "alice-impersonates-someone", metav1.DeleteOptions{})).To(Succeed())
		})
		Eventually(func(g Gomega) {
			clk.SetTime(clk.Now().Add(defaultTokenCacheTTL)) // the refusal expires; each try asks the cluster again
			ssr, err := asking(hubUserAlice, aliceGroups, someone).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ssr.Status.UserInfo.Username).To(Equal("someone"))
			g.Expect(ssr.Status.UserInfo.Groups).To(ConsistOf("system:authenticated"), "someone's groups, not alice's")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		By("a group it may not impersonate beside the user: refused")
		_, err = asking(hubUserAlice, aliceGroups, map[string][]string{"Requested-Impersonate-User": {"someone"},
			"Requested-Impersonate-Group": {"system:masters"}}).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(`"system:masters"`))

		By("another hub user asking the same: refused")
		_, err = asking(hubUserBob, nil, someone).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring(hubUserBob))

		By("a group without a user: 400, as the kube-apiserver answers")
		_, err = asking(hubUserAlice, aliceGroups, map[string][]string{"Requested-Impersonate-Group": {"system:masters"}}).
			CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "got %v", err)
	})

	It("answers the impersonator 400 without a user, and 403 when hub identities are refused", func(ctx SpecContext) {
		p := startProxy(nil)
		_, err := p.tlsClient(impersonatorPair, rest.ImpersonationConfig{}).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsBadRequest(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("Impersonate-User"))

		refusing := startProxy(func(o *Options) { o.RefuseHubIdentities = true })
		_, err = refusing.tlsClient(impersonatorPair, rest.ImpersonationConfig{UserName: hubUserAlice}).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("--enable-impersonation=false"))
		reader := refusing.client(tokenFor(ctx, managedAdmin, teamNamespace, "reader"), rest.ImpersonationConfig{})
		_, err = reader.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred(), "the cluster's own tokens still pass")
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

		By("refusing hub tokens: the service-proxy never asks the hub")
		code, body := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces",
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
		reader := tokenFor(ctx, managedAdmin, teamNamespace, "reader")
		Expect(get(reader)).To(Equal(http.StatusOK))
		Expect(get(reader)).To(Equal(http.StatusOK))
		Expect(p.managedReviews.Load()).To(Equal(int64(1)))

		Expect(get("garbage")).To(Equal(http.StatusUnauthorized))
		Expect(get("garbage")).To(Equal(http.StatusUnauthorized))
		Expect(p.managedReviews.Load()).To(Equal(int64(2)), "rejections are cached too")

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
		By("an agent that may not create TokenReviews on the managed cluster")
		p := startProxy(func(o *Options) {
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
