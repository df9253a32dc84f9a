package addonapi

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestAnAddOnReadFromTheCacheSharesNothingWithIt: the cache is asked not to copy an add-on, since the conversion to
// v1alpha1 copies it, and what the reader gets and changes leaves the cached object as it was.
func TestAnAddOnReadFromTheCacheSharesNothingWithIt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	stored := &addonv1beta1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster1", Name: "cluster-proxy",
		Labels: map[string]string{"app": "cluster-proxy"}}}
	stored.Status.Conditions = []metav1.Condition{{Type: "Available", Status: metav1.ConditionTrue, Reason: "ProbeAvailable"}}
	store := &sharingCache{stored: stored}
	c := &wireCache{Cache: store}

	got := &addonv1alpha1.ManagedClusterAddOn{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(stored), got)).To(Succeed())
	list := &addonv1alpha1.ManagedClusterAddOnList{}
	g.Expect(c.List(ctx, list)).To(Succeed())
	g.Expect(store.copies).To(BeZero(), "the cache copies nothing the conversion copies again")
	g.Expect(list.Items).To(HaveLen(1))

	for _, mca := range []*addonv1alpha1.ManagedClusterAddOn{got, &list.Items[0]} {
		g.Expect(mca.Status.Conditions).To(HaveLen(1))
		mca.Status.Conditions[0].Reason = "Changed"
		mca.Labels["app"] = "changed"
	}
	g.Expect(stored.Status.Conditions[0].Reason).To(Equal("ProbeAvailable"))
	g.Expect(stored.Labels).To(Equal(map[string]string{"app": "cluster-proxy"}))
}

// sharingCache holds one v1beta1 add-on and answers as controller-runtime's cache does: a deep copy, or, with
// UnsafeDisableDeepCopy, the cached object itself.
type sharingCache struct {
	cache.Cache
	stored *addonv1beta1.ManagedClusterAddOn
	copies int
}

func (c *sharingCache) object(unsafe *bool) *addonv1beta1.ManagedClusterAddOn {
	if unsafe != nil && *unsafe {
		return c.stored
	}
	c.copies++
	return c.stored.DeepCopy()
}

func (c *sharingCache) Get(_ context.Context, _ client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	o := client.GetOptions{}
	o.ApplyOptions(opts)
	*obj.(*addonv1beta1.ManagedClusterAddOn) = *c.object(o.UnsafeDisableDeepCopy)
	return nil
}

func (c *sharingCache) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := client.ListOptions{}
	o.ApplyOptions(opts)
	list.(*addonv1beta1.ManagedClusterAddOnList).Items = []addonv1beta1.ManagedClusterAddOn{*c.object(o.UnsafeDisableDeepCopy)}
	return nil
}
