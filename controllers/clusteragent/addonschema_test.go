package clusteragent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// addOnCRD is the ManagedClusterAddOn CRD of the open-cluster-management.io/api module the operator builds with, the
// one OCM installs on hubs of that version.
func addOnCRD(t *testing.T) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	paths, err := testenv.CRDPaths()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		if !strings.HasSuffix(p, "managedclusteraddons.crd.yaml") {
			continue
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(raw, crd); err != nil {
			t.Fatalf("%s: %v", filepath.Base(p), err)
		}
		return crd
	}
	t.Fatal("no ManagedClusterAddOn CRD among the hub CRDs")
	return nil
}

func v1alpha1Status(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == "v1alpha1" {
			st := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["status"]
			return &st
		}
	}
	return nil
}

// withStatus returns crd with its v1alpha1 status schema changed by edit.
func withStatus(crd *apiextensionsv1.CustomResourceDefinition, edit func(*apiextensionsv1.JSONSchemaProps)) *apiextensionsv1.CustomResourceDefinition {
	crd = crd.DeepCopy()
	for i := range crd.Spec.Versions {
		if crd.Spec.Versions[i].Name == "v1alpha1" {
			st := crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["status"]
			edit(&st)
			crd.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["status"] = st
		}
	}
	return crd
}

func TestAddOnStatusIsWrittenWholeOnlyWhenTheGoTypesHoldEveryFieldOfTheInstalledCRD(t *testing.T) {
	crd := addOnCRD(t)
	if v1alpha1Status(crd) == nil {
		t.Fatal("the CRD has no v1alpha1 status schema")
	}
	conditions := func(st *apiextensionsv1.JSONSchemaProps) *apiextensionsv1.JSONSchemaProps {
		return st.Properties["conditions"].Items.Schema
	}
	cases := []struct {
		name string
		crd  *apiextensionsv1.CustomResourceDefinition
		want bool
	}{
		{"the CRD of the api module the operator builds with", crd, true},
		{"a newer OCM's status field", withStatus(crd, func(st *apiextensionsv1.JSONSchemaProps) {
			st.Properties["lastHeartbeat"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		}), false},
		{"a newer field deep in every condition", withStatus(crd, func(st *apiextensionsv1.JSONSchemaProps) {
			items := conditions(st)
			items.Properties["severity"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
			c := st.Properties["conditions"]
			c.Items.Schema = items
			st.Properties["conditions"] = c
		}), false},
		{"a status part that keeps unknown fields", withStatus(crd, func(st *apiextensionsv1.JSONSchemaProps) {
			hc := st.Properties["healthCheck"]
			hc.XPreserveUnknownFields = ptr.To(true)
			st.Properties["healthCheck"] = hc
		}), false},
		{"a CRD without the v1alpha1 version", func() *apiextensionsv1.CustomResourceDefinition {
			c := crd.DeepCopy()
			for i := range c.Spec.Versions {
				c.Spec.Versions[i].Name = "v9"
			}
			return c
		}(), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s addOnSchema
			s.observe(tc.crd, false)
			if got := s.fits.Load(); got != tc.want {
				t.Errorf("written whole = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("until the CRD is read, once it is deleted, and for another CRD: merge patches", func(t *testing.T) {
		var s addOnSchema
		if s.fits.Load() {
			t.Error("written whole before the CRD was read")
		}
		s.observe(crd, false)
		s.observe(crd, true)
		if s.fits.Load() {
			t.Error("written whole after the CRD was deleted")
		}
		other := crd.DeepCopy()
		other.Name = "manifestworks.work.open-cluster-management.io"
		s.observe(other, false)
		if s.fits.Load() {
			t.Error("written whole on the strength of another CRD")
		}
	})
}
