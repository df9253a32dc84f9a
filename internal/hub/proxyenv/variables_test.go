package proxyenv

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
)

func TestVariables(t *testing.T) {
	cases := []struct {
		name      string
		vars      []addonv1alpha1.CustomizedVariable
		want      AgentVariables
		wantField string
	}{
		{name: "none"},
		{name: "a service domain", vars: []addonv1alpha1.CustomizedVariable{{Name: "serviceDomain", Value: "svc.cluster.local"}},
			want: AgentVariables{ServiceDomain: "svc.cluster.local"}},
		{name: "a fully qualified service domain loses its trailing dot", vars: []addonv1alpha1.CustomizedVariable{{Name: "serviceDomain", Value: "svc.example.org."}},
			want: AgentVariables{ServiceDomain: "svc.example.org"}},
		{name: "impersonation off", vars: []addonv1alpha1.CustomizedVariable{{Name: "enableImpersonation", Value: "false"}},
			want: AgentVariables{DisableImpersonation: true}},
		{name: "impersonation on", vars: []addonv1alpha1.CustomizedVariable{{Name: "enableImpersonation", Value: "true"}}},
		{name: "other add-ons' variables are left alone", vars: []addonv1alpha1.CustomizedVariable{{Name: "LOG_LEVEL", Value: "!!"}}},
		{name: "a bad domain names its entry", vars: []addonv1alpha1.CustomizedVariable{{Name: "x", Value: "y"}, {Name: "serviceDomain", Value: "Not A Domain"}},
			wantField: "spec.customizedVariables[1].value"},
		{name: "a bad boolean names its entry", vars: []addonv1alpha1.CustomizedVariable{{Name: "enableImpersonation", Value: "maybe"}},
			wantField: "spec.customizedVariables[0].value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Variables(tc.vars)
			if tc.wantField != "" {
				var fe *FieldError
				g.Expect(errors.As(err, &fe)).To(BeTrue())
				g.Expect(fe.Field).To(Equal(tc.wantField))
				g.Expect(fe.Reason).To(Equal(proxyv1alpha1.ReasonInvalidCustomizedVariable))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
