package apply

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// desiredConfigMap is what the operator renders: its data stands for the spec.
func desiredConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: "status", Namespace: "c1",
			Labels:          map[string]string{"app": "ours"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "our-owner"}},
		},
		Data: map[string]string{"rendered": "yes"},
	}
}

func TestEnsureReplaced(t *testing.T) {
	ctx := context.Background()
	otherOwner := metav1.OwnerReference{APIVersion: "v1", Kind: "Secret", Name: "theirs", UID: "their-owner"}
	for _, tc := range []struct {
		name string
		// before changes the object EnsureReplaced created, as another writer would, with its field manager.
		before      func(g Gomega, c client.Client, live *corev1.ConfigMap)
		getNotFound bool // the cache has not seen the object yet
		// desired, when set, is a new rendering, to ensure after before
		desired func() *corev1.ConfigMap
		wrote   bool
		writes  int
		err     error
		check   func(g Gomega, returned, stored *corev1.ConfigMap)
	}{
		{
			name: "created when missing", wrote: true, writes: 1,
			check: func(g Gomega, returned, stored *corev1.ConfigMap) {
				g.Expect(stored.Data).To(Equal(map[string]string{"rendered": "yes"}))
				g.Expect(stored.Annotations).To(HaveKey(HashAnnotation))
				g.Expect(returned.ResourceVersion).To(Equal(stored.ResourceVersion), "the create's answer is returned")
			},
		},
		{
			name:   "already created by an earlier pass the cache has not seen: ErrNotCached, nothing returned",
			before: func(Gomega, client.Client, *corev1.ConfigMap) {}, getNotFound: true, wrote: false, writes: 1, // the failed create
			err:   ErrNotCached,
			check: func(g Gomega, returned, _ *corev1.ConfigMap) { g.Expect(returned).To(BeNil()) },
		},
		{
			name: "another writer's object of the name, without the rendered labels, which the cache never holds: replaced",
			before: func(g Gomega, c client.Client, live *corev1.ConfigMap) {
				live.Labels = map[string]string{"addon": "theirs"}
				live.Annotations = nil
				live.OwnerReferences = []metav1.OwnerReference{otherOwner}
				live.Data = map[string]string{"their": "agent"}
				g.Expect(c.Update(ctx, live, client.FieldOwner("addon-manager"))).To(Succeed())
			},
			getNotFound: true, wrote: true, writes: 2, // the failed create, the replacement
			check: func(g Gomega, returned, stored *corev1.ConfigMap) {
				g.Expect(stored.Data).To(Equal(map[string]string{"rendered": "yes"}))
				g.Expect(stored.Labels).To(Equal(map[string]string{"app": "ours", "addon": "theirs"}), "the cache's labels are on it now")
				g.Expect(stored.Annotations).To(HaveKey(HashAnnotation))
				g.Expect(stored.OwnerReferences).To(ConsistOf(desiredConfigMap().OwnerReferences[0], otherOwner))
				g.Expect(returned.ResourceVersion).To(Equal(stored.ResourceVersion))
			},
		},
		{
			name:   "same hash: no write",
			before: func(Gomega, client.Client, *corev1.ConfigMap) {}, wrote: false, writes: 0,
			check: func(g Gomega, returned, stored *corev1.ConfigMap) {
				g.Expect(returned.ResourceVersion).To(Equal(stored.ResourceVersion), "the live object is returned")
			},
		},
		{
			name: "same hash, a metadata-only foreign writer: no write",
			before: func(g Gomega, c client.Client, live *corev1.ConfigMap) {
				live.Labels["team"] = "theirs"
				live.Annotations["note"] = "theirs"
				g.Expect(c.Update(ctx, live, client.FieldOwner("kubectl-label"))).To(Succeed())
			},
			wrote: false, writes: 0,
			check: func(g Gomega, _, stored *corev1.ConfigMap) {
				g.Expect(stored.Labels).To(HaveKeyWithValue("team", "theirs"))
			},
		},
		{
			name: "a foreign spec writer: replaced, keeping the others' labels, annotations and owner references",
			before: func(g Gomega, c client.Client, live *corev1.ConfigMap) {
				live.Data = map[string]string{"rendered": "edited", "injected": "x"}
				live.Labels["team"] = "theirs"
				live.Annotations["note"] = "theirs"
				live.OwnerReferences = append(live.OwnerReferences, otherOwner)
				g.Expect(c.Update(ctx, live, client.FieldOwner("kubectl-edit"))).To(Succeed())
			},
			wrote: true, writes: 1,
			check: func(g Gomega, returned, stored *corev1.ConfigMap) {
				g.Expect(stored.Data).To(Equal(map[string]string{"rendered": "yes"}), "what others added next to the rendered fields is gone")
				g.Expect(stored.Labels).To(Equal(map[string]string{"app": "ours", "team": "theirs"}))
				g.Expect(stored.Annotations).To(HaveKeyWithValue("note", "theirs"))
				g.Expect(stored.Annotations).To(HaveKey(HashAnnotation))
				g.Expect(stored.OwnerReferences).To(ConsistOf(desiredConfigMap().OwnerReferences[0], otherOwner))
				g.Expect(returned.Data).To(Equal(stored.Data), "the update's answer is returned")
				g.Expect(returned.ResourceVersion).To(Equal(stored.ResourceVersion))
			},
		},
		{
			name: "a new rendering: replaced with the new labels, owner references and hash, keeping the others' ones",
			before: func(g Gomega, c client.Client, live *corev1.ConfigMap) {
				live.Labels["team"] = "theirs"
				live.OwnerReferences = append(live.OwnerReferences, otherOwner)
				g.Expect(c.Update(ctx, live, client.FieldOwner("kubectl-label"))).To(Succeed())
			},
			desired: func() *corev1.ConfigMap {
				cm := desiredConfigMap()
				cm.Labels["app"] = "ours-v2"
				cm.OwnerReferences[0].UID = "our-new-owner"
				cm.Data["rendered"] = "v2"
				return cm
			},
			wrote: true, writes: 1,
			check: func(g Gomega, _, stored *corev1.ConfigMap) {
				g.Expect(stored.Data).To(Equal(map[string]string{"rendered": "v2"}))
				g.Expect(stored.Labels).To(Equal(map[string]string{"app": "ours-v2", "team": "theirs"}))
				g.Expect(stored.OwnerReferences).To(ContainElements(otherOwner, HaveField("UID", BeEquivalentTo("our-new-owner"))))
				first, err := typedHash(desiredConfigMap())
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(stored.Annotations[HashAnnotation]).NotTo(Equal(first), "the new rendering's hash is recorded")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			writes, getNotFound := 0, false
			// base is the API server as an uncached reader sees it; c, the cached client, misses what the cache has
			// not seen (getNotFound).
			base := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithReturnManagedFields().Build()
			c := interceptor.NewClient(base, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if getNotFound {
						return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
					}
					return c.Get(ctx, key, obj, opts...)
				},
				Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					writes++
					return c.Create(ctx, obj, opts...)
				},
				Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
					writes++
					return c.Update(ctx, obj, opts...)
				},
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					writes++
					return c.Patch(ctx, obj, patch, opts...)
				},
			})
			if tc.before != nil {
				_, wrote, err := EnsureReplaced(ctx, c, base, desiredConfigMap())
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(wrote).To(BeTrue())
				live := &corev1.ConfigMap{}
				g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "c1", Name: "status"}, live)).To(Succeed())
				tc.before(g, c, live)
			}
			writes, getNotFound = 0, tc.getNotFound

			desired := desiredConfigMap()
			if tc.desired != nil {
				desired = tc.desired()
			}
			returned, wrote, err := EnsureReplaced(ctx, c, base, desired)
			if tc.err != nil {
				g.Expect(err).To(MatchError(tc.err))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(wrote).To(Equal(tc.wrote))
			g.Expect(writes).To(Equal(tc.writes), "API writes")
			getNotFound = false
			stored := &corev1.ConfigMap{}
			g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "c1", Name: "status"}, stored)).To(Succeed())
			tc.check(g, returned, stored)
		})
	}
}

func TestTypedHashIgnoresTheHashAnnotation(t *testing.T) {
	g := NewWithT(t)
	a, b := desiredConfigMap(), desiredConfigMap()
	b.Annotations = map[string]string{HashAnnotation: "stale"}
	ha, err := typedHash(a)
	g.Expect(err).NotTo(HaveOccurred())
	hb, err := typedHash(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hb).To(Equal(ha))
	b.Data["rendered"] = "other"
	hb, err = typedHash(b)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hb).NotTo(Equal(ha), "a changed rendering changes the hash")
}
