package proxyenv

import (
	"testing"

	. "github.com/onsi/gomega"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestClusterRegistries(t *testing.T) {
	const f = ClusterRegistriesField
	cases := []struct {
		name       string
		annotation *string
		want       []addonv1alpha1.ImageMirror
		field      string
	}{
		{name: "no annotation"},
		{name: "empty", annotation: ptrTo(" ")},
		{name: "entries", annotation: ptrTo(`{"registries":[{"source":"quay.io/ocm","mirror":"mirror.local:5000/ocm"},{"mirror":"all.local"}]}`),
			want: []addonv1alpha1.ImageMirror{{Source: "quay.io/ocm", Mirror: "mirror.local:5000/ocm"}, {Mirror: "all.local"}}},
		{name: "another add-on's keys only", annotation: ptrTo(`{"pullSecret":"ns.secret"}`)},
		{name: "not JSON", annotation: ptrTo(`{"registries":`), field: f},
		{name: "registries not a list", annotation: ptrTo(`{"registries":"quay.io"}`), field: f},
		{name: "empty mirror", annotation: ptrTo(`{"registries":[{"source":"quay.io"}]}`), field: f + ".registries[0].mirror"},
		{name: "scheme in the second mirror", annotation: ptrTo(`{"registries":[{"source":"quay.io","mirror":"a.local"},{"source":"docker.io","mirror":"https://b.local"}]}`),
			field: f + ".registries[1].mirror"},
		{name: "upper-case source", annotation: ptrTo(`{"registries":[{"source":"Quay.io","mirror":"a.local"}]}`), field: f + ".registries[0].source"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			annotations := map[string]string{"other": "x"}
			if tc.annotation != nil {
				annotations[clusterv1.ClusterImageRegistriesAnnotationKey] = *tc.annotation
			}
			got, err := ClusterRegistries(annotations)
			if tc.field != "" {
				_ = expectFieldError(g, err, tc.field, proxyv1alpha1.ReasonInvalidImageRegistries)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestAgentImageTakesTheConfigurationFirstThenTheCluster(t *testing.T) {
	type m = addonv1alpha1.ImageMirror
	const image = "quay.io/ocm/proxy:v1"
	cases := []struct {
		name                string
		image               string
		configured, cluster []m
		want, field, reason string
	}{
		{name: "neither", want: image},
		{name: "the configuration's match wins over the cluster's",
			configured: []m{{Source: "quay.io/ocm", Mirror: "adc.local/ocm"}}, cluster: []m{{Source: "quay.io/ocm", Mirror: "cluster.local/ocm"}},
			want: "adc.local/ocm/proxy:v1"},
		{name: "the cluster's when the configuration's does not match",
			configured: []m{{Source: "docker.io", Mirror: "adc.local"}}, cluster: []m{{Source: "quay.io/ocm", Mirror: "cluster.local/ocm"}},
			want: "cluster.local/ocm/proxy:v1"},
		{name: "the cluster's last match wins",
			cluster: []m{{Source: "quay.io", Mirror: "first.local"}, {Source: "quay.io/ocm", Mirror: "last.local/x"}, {Source: "docker.io", Mirror: "no.local"}},
			want:    "last.local/x/proxy:v1"},
		{name: "a cluster entry without a source takes every image, by its last segment",
			image:   "localhost:5000/a/b/proxy@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			cluster: []m{{Mirror: "all.local/mirror"}},
			want:    "all.local/mirror/proxy@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{name: "a cluster match at a boundary only", cluster: []m{{Source: "quay.io/oc", Mirror: "x.local"}}, want: image},
		{name: "an invalid configuration entry is the configuration's error, whatever the cluster says",
			configured: []m{{Source: "quay.io", Mirror: "HTTP://x"}}, cluster: []m{{Mirror: "all.local"}}, field: "spec.registries[0].mirror", reason: proxyv1alpha1.ReasonInvalidRegistryMirror},
		{name: "a cluster rewrite that is no image reference names the cluster's entry",
			image: "quay.io/ocm:v1", cluster: []m{{Source: "docker.io", Mirror: "d.local"}, {Source: "quay.io/ocm", Mirror: "mirror.local:5000"}},
			field: ClusterRegistriesField + ".registries[1].mirror", reason: proxyv1alpha1.ReasonInvalidImageRegistries},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			in := tc.image
			if in == "" {
				in = image
			}
			got, err := AgentImage(in, tc.configured, tc.cluster)
			if tc.field != "" {
				_ = expectFieldError(g, err, tc.field, tc.reason)
				g.Expect(got).To(BeEmpty())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func ptrTo(s string) *string { return &s }
