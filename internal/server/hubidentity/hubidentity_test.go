package hubidentity

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/review"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
)

func TestMappingPrefixesServiceAccountsAndTheirGroupsOrEverything(t *testing.T) {
	g := NewWithT(t)
	sa := Identity{User: "system:serviceaccount:team:alice", UID: "u1",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated", "", "team"},
		Extra:  map[string][]string{"k": {"v"}}}
	g.Expect(Mapping{}.Impersonation(sa)).To(Equal(transport.ImpersonationConfig{
		UserName: "cluster:hub:system:serviceaccount:team:alice", UID: "u1",
		Groups: []string{"cluster:hub:system:serviceaccounts", "cluster:hub:system:serviceaccounts:team", "team"},
		Extra:  map[string][]string{"k": {"v"}}}), "a hub ServiceAccount of team takes none of the cluster's bindings of its own team ServiceAccounts")
	g.Expect(Mapping{UnprefixedServiceAccountGroups: true}.Impersonation(sa).Groups).To(Equal(
		[]string{"system:serviceaccounts", "system:serviceaccounts:team", "team"}), "the existing add-on's names, when asked")
	g.Expect(Mapping{}.Impersonation(Identity{User: "bob", Groups: []string{"system:serviceaccountsx"}}).Groups).To(Equal(
		[]string{"system:serviceaccountsx"}), "only the ServiceAccount groups")
	g.Expect(Mapping{}.Impersonation(Identity{User: "alice", Groups: []string{"admins"}})).To(Equal(transport.ImpersonationConfig{
		UserName: "alice", Groups: []string{"admins"}}), "users and groups keep their names")
	g.Expect(Mapping{Prefix: "hub:"}.Impersonation(sa)).To(HaveField("UserName", "hub:system:serviceaccount:team:alice"))
	g.Expect(Mapping{Prefix: "hub:"}.Impersonation(sa).Groups).To(Equal([]string{"hub:system:serviceaccounts", "hub:system:serviceaccounts:team", "hub:team"}))
}

func TestVerbFollowsTheAPIServersNamesForASubresource(t *testing.T) {
	g := NewWithT(t)
	for method, verb := range map[string]string{"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update",
		"PATCH": "patch", "DELETE": "delete", "OPTIONS": "options"} {
		g.Expect(Verb(method)).To(Equal(verb), method)
	}
}

func TestDecisionsOfTheSameUserAreCachedWhateverTheGroupOrder(t *testing.T) {
	g := NewWithT(t)
	a := Identity{User: "u", Groups: []string{"a", "b"}}
	b := Identity{User: "u", Groups: []string{"b", "a"}}
	key := func(id Identity, cluster string) [32]byte {
		return review.AccessKey(specFor(id, cluster, "get"))
	}
	g.Expect(key(a, "c1")).To(Equal(key(b, "c1")))
	g.Expect(key(a, "c1")).NotTo(Equal(key(a, "c2")))
}

// The reviewer against a real kube-apiserver: its TokenReview and its RBAC with resourceNames.
func TestReviewerAsksTheHubAndKeepsTheAnswers(t *testing.T) {
	g := NewWithT(t)
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("run through 'make test', or export KUBEBUILDER_ASSETS=$(make -s envtest-assets)")
	}
	env := &envtest.Environment{}
	cfg, err := env.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(cfg)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	for _, sa := range []string{"alice", "bob"} {
		_, err = cs.CoreV1().ServiceAccounts("team").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reach-cluster1"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{Group}, Resources: []string{"clusters/proxy"}, ResourceNames: []string{"cluster1"},
			Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reach-cluster1"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reach-cluster1"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team", Name: "alice"}}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	var reviews, accessReviews atomic.Int64
	counting := rest.CopyConfig(cfg)
	counting.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			switch {
			case strings.HasSuffix(r.URL.Path, "/tokenreviews"):
				reviews.Add(1)
			case strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
				accessReviews.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	now := time.Now()
	r, err := NewReviewer(counting, ReviewerOptions{TTL: time.Minute, Now: func() time.Time { return now }})
	g.Expect(err).NotTo(HaveOccurred())

	aliceToken, err := kubeclient.ServiceAccountToken(ctx, cs, "team", "alice", time.Hour)
	g.Expect(err).NotTo(HaveOccurred())
	id, ok, err := r.Authenticate(ctx, aliceToken)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(id.User).To(Equal("system:serviceaccount:team:alice"))
	g.Expect(id.Groups).To(ContainElement("system:serviceaccounts:team"))
	_, ok, err = r.Authenticate(ctx, "not-a-token")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse())

	allowed := func(id Identity, cluster, verb string) bool {
		d, err := r.Authorize(ctx, id, cluster, verb)
		g.Expect(err).NotTo(HaveOccurred())
		return d.Allowed
	}
	g.Expect(allowed(id, "cluster1", "get")).To(BeTrue())
	g.Expect(allowed(id, "cluster1", "create")).To(BeFalse(), "the rule names get only")
	g.Expect(allowed(id, "cluster2", "get")).To(BeFalse(), "resourceNames: [cluster1]")
	g.Expect(allowed(Identity{User: "system:serviceaccount:team:bob", Groups: id.Groups}, "cluster1", "get")).To(BeFalse())
	g.Expect(reviews.Load()).To(Equal(int64(2)))
	g.Expect(accessReviews.Load()).To(Equal(int64(4)))

	// Asked again within the TTL: nothing reaches the hub; after it, everything does.
	_, _, _ = r.Authenticate(ctx, aliceToken)
	g.Expect(allowed(id, "cluster1", "get")).To(BeTrue())
	g.Expect(reviews.Load()).To(Equal(int64(2)))
	g.Expect(accessReviews.Load()).To(Equal(int64(4)))
	now = now.Add(time.Minute)
	_, _, _ = r.Authenticate(ctx, aliceToken)
	g.Expect(allowed(id, "cluster1", "get")).To(BeTrue())
	g.Expect(reviews.Load()).To(Equal(int64(3)))
	g.Expect(accessReviews.Load()).To(Equal(int64(5)))
}
