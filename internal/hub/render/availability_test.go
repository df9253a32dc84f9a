package render

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestServerPodDisruptionBudgetLetsOneReplicaGoAtATime(t *testing.T) {
	for _, replicas := range []int32{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("%d replicas", replicas), func(t *testing.T) {
			g := NewWithT(t)
			m := mpc(nil)
			m.UID = types.UID("mpc-uid")
			m.Spec.ProxyServer.Namespace = "hub"
			m.Spec.ProxyServer.Replicas = replicas
			pdb := ServerPodDisruptionBudget(m)
			d := ServerDeployment(m)

			g.Expect(pdb.Name).To(Equal(d.Name))
			g.Expect(pdb.Namespace).To(Equal("hub"))
			g.Expect(pdb.Labels).To(Equal(Labels(m)))
			g.Expect(pdb.OwnerReferences).To(HaveExactElements(And(HaveField("Kind", "ManagedProxyConfiguration"),
				HaveField("Name", "cluster-proxy"), HaveField("UID", types.UID("mpc-uid")), HaveField("Controller", HaveValue(BeTrue())))))
			// maxUnavailable, never minAvailable: a drain of a one-replica hub proceeds, and more keep replicas-1 serving.
			g.Expect(pdb.Spec.MinAvailable).To(BeNil())
			g.Expect(pdb.Spec.MaxUnavailable).To(HaveValue(Equal(intstr.FromInt32(1))))
			g.Expect(pdb.Spec.Selector).To(Equal(d.Spec.Selector), "the Deployment's pods, no more, no fewer")
			g.Expect(pdb.Spec.Selector.MatchLabels).To(Equal(d.Spec.Template.Labels))
		})
	}
}

func TestServerPodsSpreadOverNodesWithoutBlockingScheduling(t *testing.T) {
	cases := []struct {
		name      string
		placement proxyv1alpha1.NodePlacement
	}{
		{name: "no node placement"},
		{name: "the user's node placement stays", placement: proxyv1alpha1.NodePlacement{
			NodeSelector: map[string]string{"node-role.kubernetes.io/infra": ""},
			Tolerations:  []corev1.Toleration{{Key: "infra", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m := mpc(nil)
			m.Spec.ProxyServer.NodePlacement = tc.placement
			pod := ServerDeployment(m).Spec.Template
			g.Expect(pod.Spec.TopologySpreadConstraints).To(Equal([]corev1.TopologySpreadConstraint{{
				MaxSkew:           1,
				TopologyKey:       "kubernetes.io/hostname",
				WhenUnsatisfiable: corev1.ScheduleAnyway,
				LabelSelector:     &metav1.LabelSelector{MatchLabels: pod.Labels},
			}}))
			// Node affinity and taints are left to their defaults (Honor and Ignore): the skew counts only the nodes
			// the placement lets the pods on.
			g.Expect(pod.Spec.TopologySpreadConstraints[0].NodeAffinityPolicy).To(BeNil())
			g.Expect(pod.Spec.NodeSelector).To(Equal(tc.placement.NodeSelector))
			g.Expect(pod.Spec.Tolerations).To(Equal(tc.placement.Tolerations))
			g.Expect(pod.Spec.Affinity).To(BeNil())
		})
	}
}

func TestServerResources(t *testing.T) {
	cases := []struct {
		name string
		spec *corev1.ResourceRequirements
		want corev1.ResourceRequirements
	}{
		{name: "unset: requests only, no limit to throttle or OOM-kill the tunnels", want: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")}}},
		{name: "set: replaces the default as a whole",
			spec: &corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
			want: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}},
		{name: "empty: none at all", spec: &corev1.ResourceRequirements{}, want: corev1.ResourceRequirements{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			m := mpc(nil)
			m.Spec.ProxyServer.Resources = tc.spec
			d := ServerDeployment(m)
			g.Expect(d.Spec.Template.Spec.Containers).To(HaveLen(1))
			g.Expect(d.Spec.Template.Spec.Containers[0].Resources).To(Equal(tc.want))
			if tc.spec != nil && tc.spec.Requests != nil {
				d.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("9")
				g.Expect(tc.spec.Requests).NotTo(HaveKey(corev1.ResourceCPU), "the Deployment holds a copy of the spec's")
			}
		})
	}
}
