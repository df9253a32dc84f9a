package addoninstall

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

func TestAnAddOnsStatusWriteDoesNotQueueAPass(t *testing.T) {
	base := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: "cluster-proxy", Namespace: "c1", Generation: 1}}
	now := metav1.Now()
	cases := map[string]struct {
		change func(*addonv1alpha1.ManagedClusterAddOn)
		queued bool
	}{
		"its status": {func(a *addonv1alpha1.ManagedClusterAddOn) {
			a.Status.Namespace = "agents"
			a.Status.Conditions = []metav1.Condition{{Type: "Available", Status: metav1.ConditionTrue}}
		}, false},
		"its spec (generation)": {func(a *addonv1alpha1.ManagedClusterAddOn) { a.Generation = 2 }, true},
		"its deletion":          {func(a *addonv1alpha1.ManagedClusterAddOn) { a.DeletionTimestamp = &now }, true},
		"its owners, which the add-on's own pass writes": {func(a *addonv1alpha1.ManagedClusterAddOn) {
			a.OwnerReferences = []metav1.OwnerReference{{Name: "cluster-proxy"}}
		}, false},
		"its installed-by label": {func(a *addonv1alpha1.ManagedClusterAddOn) {
			a.Labels = map[string]string{InstalledByLabel: "placement"}
		}, true},
		"another label": {func(a *addonv1alpha1.ManagedClusterAddOn) { a.Labels = map[string]string{"team": "a"} }, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			after := base.DeepCopy()
			tc.change(after)
			NewWithT(t).Expect(addOnInputChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: after})).To(Equal(tc.queued))
		})
	}
}
