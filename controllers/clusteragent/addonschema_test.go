package clusteragent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
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

// TestAddOnStatusWriteFollowsTheInstalledCRD checks that applyAddOnStatus acts on the gate: a PUT of the whole status
// only while the CRD fits the Go types, else a merge patch that names only what the pass changed, so a status field
// the Go types lack (which the typed cache cannot even hold) is never sent and stays as stored. The envtest that
// keeps OCM's status fields runs on a CRD that fits, so it only ever sees the PUT.
func TestAddOnStatusWriteFollowsTheInstalledCRD(t *testing.T) {
	crd := addOnCRD(t)
	newer := withStatus(crd, func(st *apiextensionsv1.JSONSchemaProps) {
		st.Properties["lastHeartbeat"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	})
	for _, tc := range []struct {
		name string
		crd  *apiextensionsv1.CustomResourceDefinition // nil: not read yet
		put  bool
	}{
		{"the CRD fits the Go types: a PUT", crd, true},
		{"a newer OCM's CRD: a merge patch", newer, false},
		{"the CRD not read yet: a merge patch", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(addonv1alpha1.Install(scheme)).To(Succeed())
			mca := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Namespace: "c1", Name: proxyv1alpha1.AddonName}}
			// OCM's addon-manager wrote its part of the status already.
			mca.Status.SupportedConfigs = []addonv1alpha1.ConfigGroupResource{{Group: addonGroup, Resource: adcs}}
			var puts int
			var patches []ctrl.Patch
			var patchBodies []string
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mca).WithStatusSubresource(mca).
				WithInterceptorFuncs(interceptor.Funcs{
					SubResourceUpdate: func(ctx context.Context, c ctrl.Client, sub string, obj ctrl.Object, opts ...ctrl.SubResourceUpdateOption) error {
						puts++
						return c.SubResource(sub).Update(ctx, obj, opts...)
					},
					SubResourcePatch: func(ctx context.Context, c ctrl.Client, sub string, obj ctrl.Object, patch ctrl.Patch, opts ...ctrl.SubResourcePatchOption) error {
						body, err := patch.Data(obj)
						g.Expect(err).NotTo(HaveOccurred())
						patches, patchBodies = append(patches, patch), append(patchBodies, string(body))
						return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
					},
				}).Build()
			r := &Reconciler{Client: c}
			if tc.crd != nil {
				r.addOnSchema.observe(tc.crd, false)
			}
			live := &addonv1alpha1.ManagedClusterAddOn{}
			g.Expect(c.Get(context.Background(), ctrl.ObjectKeyFromObject(mca), live)).To(Succeed())
			g.Expect(r.applyAddOnStatus(context.Background(), &scope{mca: live})).To(Succeed())

			if tc.put {
				g.Expect(puts).To(Equal(1))
				g.Expect(patches).To(BeEmpty())
			} else {
				g.Expect(puts).To(BeZero(), "a PUT of the typed add-on would drop the status fields its Go types lack")
				g.Expect(patches).To(HaveLen(1))
				g.Expect(patches[0].Type()).To(Equal(types.MergePatchType))
				g.Expect(patchBodies[0]).To(ContainSubstring(`"conditions"`), "what the pass changed")
				g.Expect(patchBodies[0]).To(ContainSubstring(`"resourceVersion"`), "locked to the add-on read")
				g.Expect(patchBodies[0]).NotTo(ContainSubstring("supportedConfigs"), "what the pass did not change is not sent")
			}
			stored := &addonv1alpha1.ManagedClusterAddOn{}
			g.Expect(c.Get(context.Background(), ctrl.ObjectKeyFromObject(mca), stored)).To(Succeed())
			g.Expect(meta.FindStatusCondition(stored.Status.Conditions, addonv1alpha1.ManagedClusterAddOnConditionConfigured)).NotTo(BeNil())
			g.Expect(stored.Status.SupportedConfigs).To(HaveLen(1), "OCM's field is kept either way")
		})
	}
}
