package proxyenv

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestResources(t *testing.T) {
	rr := func(reqCPU, limCPU string) corev1.ResourceRequirements {
		r := corev1.ResourceRequirements{}
		if reqCPU != "" {
			r.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(reqCPU)}
		}
		if limCPU != "" {
			r.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limCPU)}
		}
		return r
	}
	entry := func(id string, r corev1.ResourceRequirements) addonv1alpha1.ContainerResourceRequirements {
		return addonv1alpha1.ContainerResourceRequirements{ContainerID: id, Resources: r}
	}
	ptr := func(r corev1.ResourceRequirements) *corev1.ResourceRequirements { return &r }

	const (
		res  = "deployments"
		name = "cluster-proxy-proxy-agent"
		ctr  = "proxy-agent"
	)
	cases := []struct {
		name  string
		reqs  []addonv1alpha1.ContainerResourceRequirements
		want  *corev1.ResourceRequirements
		field string
	}{
		{name: "no entries", want: nil},
		{name: "wildcard", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("*:*:*", rr("100m", "200m"))},
			want: ptr(rr("100m", "200m"))},
		{name: "partial wildcard", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("deployments:*:proxy-agent", rr("100m", ""))},
			want: ptr(rr("100m", ""))},
		{name: "specific after wildcard wins", reqs: []addonv1alpha1.ContainerResourceRequirements{
			entry("*:*:*", rr("100m", "200m")),
			entry("deployments:cluster-proxy-proxy-agent:proxy-agent", rr("300m", "1")),
			entry("deployments:other:proxy-agent", rr("5", "5")),
		}, want: ptr(rr("300m", "1"))},
		{name: "wildcard after specific wins too (last match)", reqs: []addonv1alpha1.ContainerResourceRequirements{
			entry("deployments:cluster-proxy-proxy-agent:proxy-agent", rr("300m", "1")),
			entry("*:*:*", rr("100m", "200m")),
		}, want: ptr(rr("100m", "200m"))},
		{name: "no match is nil", reqs: []addonv1alpha1.ContainerResourceRequirements{
			entry("daemonsets:*:*", rr("100m", "")),
			entry("deployments:other:*", rr("100m", "")),
			entry("*:*:service-proxy", rr("100m", "")),
		}, want: nil},
		{name: "request equal to limit is fine", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("*:*:*", rr("1", "1000m"))},
			want: ptr(rr("1", "1000m"))},

		{name: "malformed ID: two parts", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("deployments:proxy-agent", rr("", ""))},
			field: "spec.resourceRequirements[0].containerID"},
		{name: "malformed ID: four parts", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("*:*:*:*", rr("", ""))},
			field: "spec.resourceRequirements[0].containerID"},
		{name: "malformed ID: empty part", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("deployments::proxy-agent", rr("", ""))},
			field: "spec.resourceRequirements[0].containerID"},
		{name: "malformed ID: empty", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("", rr("", ""))},
			field: "spec.resourceRequirements[0].containerID"},
		{name: "malformed ID: whitespace", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("deployments: x :proxy-agent", rr("", ""))},
			field: "spec.resourceRequirements[0].containerID"},
		{name: "malformed ID in a non-matching later entry", reqs: []addonv1alpha1.ContainerResourceRequirements{
			entry("*:*:*", rr("100m", "")), entry("bad", rr("", "")),
		}, field: "spec.resourceRequirements[1].containerID"},
		{name: "request > limit", reqs: []addonv1alpha1.ContainerResourceRequirements{
			entry("*:*:*", rr("100m", "")), entry("deployments:*:*", rr("500m", "200m")),
		}, field: "spec.resourceRequirements[1].resources"},
		{name: "request > limit for memory only", reqs: []addonv1alpha1.ContainerResourceRequirements{
			entry("*:*:*", corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("512Mi")},
			}),
		}, field: "spec.resourceRequirements[0].resources"},
		{name: "negative limit", reqs: []addonv1alpha1.ContainerResourceRequirements{entry("*:*:*", rr("", "-1"))},
			field: "spec.resourceRequirements[0].resources"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Resources(tc.reqs, res, name, ctr)
			if tc.field != "" {
				_ = expectFieldError(g, err, tc.field, proxyv1alpha1.ReasonInvalidResourceRequirements)
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			if tc.want == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}

	t.Run("result is a copy", func(t *testing.T) {
		g := NewWithT(t)
		reqs := []addonv1alpha1.ContainerResourceRequirements{entry("*:*:*", rr("100m", "200m"))}
		got, err := Resources(reqs, res, name, ctr)
		g.Expect(err).NotTo(HaveOccurred())
		got.Requests[corev1.ResourceCPU] = resource.MustParse("9")
		g.Expect(reqs[0].Resources.Requests.Cpu().String()).To(Equal("100m"))
	})
}
