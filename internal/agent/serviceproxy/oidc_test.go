package serviceproxy

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-jose/go-jose/v4"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
)

// The OIDC issuer of these specs is a real one this project did not write: the hub kube-apiserver's ServiceAccount
// issuer, with its discovery document and keys (/.well-known/openid-configuration, /openid/v1/jwks), opened to
// anonymous clients as an administrator does for OIDC consumers.
var _ = Describe("OIDC tokens", func() {
	const clientID = "cluster-proxy"
	var issuer, caFile string
	var clk *clocktesting.FakePassiveClock

	BeforeEach(func(ctx SpecContext) {
		issuer = hubEnv.ControlPlane.GetAPIServer().SecureServing.URL("https", "/").String()
		_, err := hubAdmin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "oidc-discovery-" + rand.Text()[:6]},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:unauthenticated"}},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		caFile = filepath.Join(GinkgoT().TempDir(), "ca.crt")
		Expect(os.WriteFile(caFile, hubEnv.Config.CAData, 0o600)).To(Succeed())
		clk = clocktesting.NewFakePassiveClock(time.Now())
	})

	// idToken is an ID token of the issuer for hub ServiceAccount hub-team/name, for audience.
	idToken := func(ctx SpecContext, name, audience string) string {
		tok, err := kubeclient.ServiceAccountToken(ctx, hubAdmin, hubNamespace, name, time.Hour, audience)
		Expect(err).NotTo(HaveOccurred())
		return tok
	}
	oidcProxy := func(change func(*OIDC)) *proxyUnderTest {
		return startProxy(func(o *Options) {
			o.now = clk.Now
			// envtest's ServiceAccount key is ECDSA P-256.
			o.OIDC = &OIDC{IssuerURL: issuer, ClientID: clientID, UsernamePrefix: "oidc:", CAFile: caFile, SigningAlgs: []string{"ES256"}}
			if change != nil {
				change(o.OIDC)
			}
		})
	}
	status := func(ctx SpecContext, p *proxyUnderTest, token string) int {
		code, _ := rawRequest(ctx, p, http.MethodGet, "/api/v1/namespaces", map[string][]string{"Authorization": {"Bearer " + token}})
		return code
	}

	It("impersonates the mapped user of a valid token, with the prefix, and the rights the managed cluster grants it", func(ctx SpecContext) {
		mapped := "oidc:system:serviceaccount:" + hubNamespace + ":alice"
		grantClusterRole(ctx, managedAdmin, "oidc-namespace-reader", []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}},
		}, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: mapped})
		p := oidcProxy(nil)
		token := idToken(ctx, "alice", clientID)
		who := whoAmI(ctx, p.client(token, rest.ImpersonationConfig{}))
		Expect(who.Username).To(Equal(mapped))
		Expect(who.Groups).To(ContainElement("system:authenticated"))
		Expect(status(ctx, p, token)).To(Equal(http.StatusOK))
		Expect(status(ctx, p, idToken(ctx, "bob", clientID))).To(Equal(http.StatusForbidden), "bob's mapped user has no rights there")
	})

	It("answers 401 to a forged, an expired, a wrong-audience and a reserved-prefix token", func(ctx SpecContext) {
		p := oidcProxy(nil)
		valid := idToken(ctx, "alice", clientID)
		Expect(status(ctx, p, valid)).To(BeElementOf(http.StatusOK, http.StatusForbidden), "the valid token authenticates")

		By("forged: the claims of a valid token, signed with a key the issuer does not publish")
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		Expect(err).NotTo(HaveOccurred())
		signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
		Expect(err).NotTo(HaveOccurred())
		claims, err := json.Marshal(map[string]any{"iss": issuer, "aud": []string{clientID}, "sub": "system:serviceaccount:hub-team:alice",
			"iat": clk.Now().Unix(), "exp": clk.Now().Add(time.Hour).Unix()})
		Expect(err).NotTo(HaveOccurred())
		signed, err := signer.Sign(claims)
		Expect(err).NotTo(HaveOccurred())
		forged, err := signed.CompactSerialize()
		Expect(err).NotTo(HaveOccurred())
		Expect(status(ctx, p, forged)).To(Equal(http.StatusUnauthorized))

		By("a signing algorithm the configuration does not accept (the default, RS256 only)")
		rs256Only := oidcProxy(func(o *OIDC) { o.SigningAlgs = nil })
		Expect(status(ctx, rs256Only, valid)).To(Equal(http.StatusUnauthorized))

		By("another audience")
		Expect(status(ctx, p, idToken(ctx, "alice", "someone-else"))).To(Equal(http.StatusUnauthorized))

		By("a mapped name with a reserved prefix: no username prefix, so system:serviceaccount:...")
		unprefixed := oidcProxy(func(o *OIDC) { o.UsernamePrefix = "-" })
		Expect(status(ctx, unprefixed, valid)).To(Equal(http.StatusUnauthorized))

		By("expired: the same valid token two hours later")
		clk.SetTime(clk.Now().Add(2 * time.Hour))
		Expect(status(ctx, p, valid)).To(Equal(http.StatusUnauthorized))
	})

	It("follows a change of the CA file without a restart", func(ctx SpecContext) {
		Expect(os.WriteFile(caFile, managedEnv.Config.CAData, 0o600)).To(Succeed()) // not the issuer's CA
		p := oidcProxy(nil)
		token := idToken(ctx, "alice", clientID)
		Expect(status(ctx, p, token)).To(Equal(http.StatusServiceUnavailable), "the issuer cannot be verified")

		Expect(os.WriteFile(caFile, hubEnv.Config.CAData, 0o600)).To(Succeed())
		clk.SetTime(clk.Now().Add(oidcCACheckInterval))
		Expect(status(ctx, p, token)).To(BeElementOf(http.StatusOK, http.StatusForbidden), "the same proxy, the new CA")
	})
})

var _ = Describe("OIDC claim mapping", func() {
	mapWith := func(cfg OIDC, claims map[string]any) (string, []string, string) {
		a, err := newOIDCAuthenticator(cfg, nil, time.Now)
		Expect(err).NotTo(HaveOccurred())
		return a.mapClaims(claims)
	}
	base := OIDC{IssuerURL: "https://issuer.example", ClientID: "c"}

	It("prefixes the user by default with the issuer, but not an email", func() {
		user, _, refusal := mapWith(base, map[string]any{"sub": "u1"})
		Expect(refusal).To(BeEmpty())
		Expect(user).To(Equal("https://issuer.example#u1"))
		email := base
		email.UsernameClaim = "email"
		user, _, refusal = mapWith(email, map[string]any{"email": "a@example.com", "email_verified": true})
		Expect(refusal).To(BeEmpty())
		Expect(user).To(Equal("a@example.com"))
		_, _, refusal = mapWith(email, map[string]any{"email": "a@example.com", "email_verified": false})
		Expect(refusal).To(ContainSubstring("email_verified"))
	})

	It("maps groups from a string or a list, with their prefix, and refuses reserved ones", func() {
		cfg := base
		cfg.UsernamePrefix, cfg.GroupsClaim, cfg.GroupsPrefix = "oidc:", "groups", "oidc:"
		_, groups, refusal := mapWith(cfg, map[string]any{"sub": "u", "groups": []any{"dev", "ops"}})
		Expect(refusal).To(BeEmpty())
		Expect(groups).To(Equal([]string{"oidc:dev", "oidc:ops"}))
		_, groups, _ = mapWith(cfg, map[string]any{"sub": "u", "groups": "dev"})
		Expect(groups).To(Equal([]string{"oidc:dev"}))
		_, _, refusal = mapWith(cfg, map[string]any{"sub": "u", "groups": []any{"dev", 3}})
		Expect(refusal).To(ContainSubstring("not a string"))

		cfg.GroupsPrefix = ""
		_, _, refusal = mapWith(cfg, map[string]any{"sub": "u", "groups": []any{"system:masters"}})
		Expect(refusal).To(ContainSubstring("reserved prefix"))
		cfg.ReservedPrefixes = []string{}
		_, groups, refusal = mapWith(cfg, map[string]any{"sub": "u", "groups": []any{"system:masters"}})
		Expect(refusal).To(BeEmpty(), "an empty list turns the check off")
		Expect(groups).To(Equal([]string{"system:masters"}))
	})

	It("requires the required claims", func() {
		cfg := base
		cfg.RequiredClaims = map[string]string{"tenant": "t1"}
		_, _, refusal := mapWith(cfg, map[string]any{"sub": "u", "tenant": "t2"})
		Expect(refusal).To(ContainSubstring("tenant"))
		_, _, refusal = mapWith(cfg, map[string]any{"sub": "u", "tenant": "t1"})
		Expect(refusal).To(BeEmpty())
	})

	It("refuses a configuration without an https issuer or a client ID, or with an empty reserved prefix", func() {
		for _, cfg := range []OIDC{
			{IssuerURL: "http://issuer.example", ClientID: "c"},
			{IssuerURL: "https://issuer.example"},
			{IssuerURL: "https://issuer.example", ClientID: "c", ReservedPrefixes: []string{"system:", ""}},
		} {
			_, err := newOIDCAuthenticator(cfg, nil, time.Now)
			Expect(err).To(HaveOccurred(), "%+v", cfg)
		}
	})
})
