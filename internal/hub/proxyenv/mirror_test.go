package proxyenv

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestMirrorImage(t *testing.T) {
	type m = addonv1alpha1.ImageMirror
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := []struct {
		name       string
		image      string
		registries []addonv1alpha1.ImageMirror
		want       string
		field      string
	}{
		{name: "no registries", image: "quay.io/ocm/proxy:v1", want: "quay.io/ocm/proxy:v1"},
		{name: "match at '/'", image: "quay.io/ocm/proxy:v1",
			registries: []m{{Source: "quay.io/ocm", Mirror: "mirror.local:5000/ocm"}},
			want:       "mirror.local:5000/ocm/proxy:v1"},
		{name: "match on the registry host", image: "quay.io/ocm/proxy:v1",
			registries: []m{{Source: "quay.io", Mirror: "mirror.local"}},
			want:       "mirror.local/ocm/proxy:v1"},
		{name: "exact repository with tag", image: "quay.io/ocm/proxy:v1",
			registries: []m{{Source: "quay.io/ocm/proxy", Mirror: "mirror.local/proxy-agent"}},
			want:       "mirror.local/proxy-agent:v1"},
		{name: "exact repository with digest", image: "quay.io/ocm/proxy@" + digest,
			registries: []m{{Source: "quay.io/ocm/proxy", Mirror: "mirror.local/proxy"}},
			want:       "mirror.local/proxy@" + digest},
		{name: "exact image", image: "quay.io/ocm/proxy",
			registries: []m{{Source: "quay.io/ocm/proxy", Mirror: "mirror.local/proxy"}},
			want:       "mirror.local/proxy"},
		{name: "no match", image: "quay.io/ocm/proxy:v1",
			registries: []m{{Source: "docker.io/ocm", Mirror: "mirror.local/ocm"}},
			want:       "quay.io/ocm/proxy:v1"},
		{name: "boundary: quay.io/ocm does not rewrite quay.io/ocmx/a", image: "quay.io/ocmx/a",
			registries: []m{{Source: "quay.io/ocm", Mirror: "mirror.local/ocm"}},
			want:       "quay.io/ocmx/a"},
		{name: "boundary: a host does not match a longer host with port", image: "localhost:5000/ocm/a:v1",
			registries: []m{{Source: "localhost", Mirror: "mirror.local"}},
			want:       "localhost:5000/ocm/a:v1"},
		{name: "first match wins", image: "quay.io/ocm/proxy:v1",
			registries: []m{
				{Source: "docker.io", Mirror: "mirror.local/docker"},
				{Source: "quay.io/ocm", Mirror: "first.local/ocm"},
				{Source: "quay.io/ocm/proxy", Mirror: "second.local/proxy"},
			},
			want: "first.local/ocm/proxy:v1"},
		{name: "invalid entry after the match is still an error", image: "quay.io/ocm/proxy:v1",
			registries: []m{{Source: "quay.io/ocm", Mirror: "mirror.local/ocm"}, {Source: "docker.io", Mirror: "https://mirror.local"}},
			field:      "spec.registries[1].mirror"},

		{name: "empty source", registries: []m{{Source: "", Mirror: "mirror.local"}}, field: "spec.registries[0].source"},
		{name: "empty mirror", registries: []m{{Source: "quay.io", Mirror: ""}}, field: "spec.registries[0].mirror"},
		{name: "scheme in source", registries: []m{{Source: "https://quay.io", Mirror: "mirror.local"}}, field: "spec.registries[0].source"},
		{name: "scheme in mirror", registries: []m{{Source: "quay.io", Mirror: "http://mirror.local"}}, field: "spec.registries[0].mirror"},
		{name: "whitespace", registries: []m{{Source: "quay.io", Mirror: "mirror.local /ocm"}}, field: "spec.registries[0].mirror"},
		{name: "trailing whitespace", registries: []m{{Source: "quay.io ", Mirror: "mirror.local"}}, field: "spec.registries[0].source"},
		{name: "trailing slash in source", registries: []m{{Source: "quay.io/ocm/", Mirror: "mirror.local"}}, field: "spec.registries[0].source"},
		{name: "trailing slash in mirror", registries: []m{{Source: "quay.io", Mirror: "mirror.local/"}}, field: "spec.registries[0].mirror"},
		{name: "leading slash", registries: []m{{Source: "/quay.io", Mirror: "mirror.local"}}, field: "spec.registries[0].source"},
		{name: "double slash", registries: []m{{Source: "quay.io", Mirror: "mirror.local//ocm"}}, field: "spec.registries[0].mirror"},
		{name: "upper case", registries: []m{{Source: "Quay.io", Mirror: "mirror.local"}}, field: "spec.registries[0].source"},
		{name: "invalid character", registries: []m{{Source: "quay.io", Mirror: "mirror.local/oc*m"}}, field: "spec.registries[0].mirror"},
		{name: "at sign", registries: []m{{Source: "quay.io", Mirror: "user@mirror.local"}}, field: "spec.registries[0].mirror"},
		{name: "second entry invalid", registries: []m{{Source: "quay.io", Mirror: "mirror.local"}, {Source: "docker.io", Mirror: "Mirror"}},
			field: "spec.registries[1].mirror"},
		{name: "rewrite result is not an image reference (port then tag)", image: "quay.io/ocm:v1",
			registries: []m{{Source: "quay.io/ocm", Mirror: "mirror.local:5000"}},
			field:      "spec.registries[0].mirror"},
		{name: "rewrite result is not an image reference (tag in mirror)", image: "quay.io/ocm/proxy:v1",
			registries: []m{{Source: "quay.io/ocm", Mirror: "mirror.local/ocm:v2"}},
			field:      "spec.registries[0].mirror"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := MirrorImage(tc.image, tc.registries)
			if tc.field != "" {
				_ = expectFieldError(g, err, tc.field, proxyv1alpha1.ReasonInvalidRegistryMirror)
				g.Expect(got).To(BeEmpty())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestIsImageReference(t *testing.T) {
	cases := map[string]bool{
		"proxy":                                 true,
		"quay.io/ocm/proxy:v1.2.3":              true,
		"localhost:5000/a/b_c__d-e--f.g:latest": true,
		"mirror.local:5000/ocm/proxy@sha256:" + strings.Repeat("ab", 32): true,
		"":                               false,
		"mirror.local:5000:v1":           false,
		"mirror/x:v2/proxy:v1":           false,
		"quay.io/OCM/proxy":              false,
		"quay.io/ocm/-proxy":             false,
		"quay.io/ocm/proxy:":             false,
		"quay.io/ocm/proxy@sha256:short": false,
		strings.Repeat("a", 256):         false,
	}
	for ref, want := range cases {
		NewWithT(t).Expect(isImageReference(ref)).To(Equal(want), ref)
	}
}
