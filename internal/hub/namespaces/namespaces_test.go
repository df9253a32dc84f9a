package namespaces

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestParseReadsTheFlagForms(t *testing.T) {
	for _, tc := range []struct {
		value, want string
		all         bool
	}{
		{value: "*", want: "*", all: true},
		{value: "b,a", want: "a,b"},
		{value: " a , a ,", want: "a"},
	} {
		g := NewWithT(t)
		s, err := Parse("proxy-server-namespaces", tc.value)
		g.Expect(err).NotTo(HaveOccurred(), tc.value)
		g.Expect(s.String()).To(Equal(tc.want), tc.value)
		g.Expect(s.IsAll()).To(Equal(tc.all), tc.value)
	}
}

func TestParseRefusesWhatIsNoNamespaceNamingTheFlag(t *testing.T) {
	for _, value := range []string{"", " , ", "Upper", "a/b", "a,*"} {
		_, err := Parse("proxy-server-namespaces", value)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("--proxy-server-namespaces")), value)
	}
}

func TestASetHasItsNamesOnlyAndEveryNamespaceHasAll(t *testing.T) {
	g := NewWithT(t)
	s := Of("cluster-proxy", "certs")
	g.Expect(s.Has("cluster-proxy")).To(BeTrue())
	g.Expect(s.Has("certs")).To(BeTrue())
	g.Expect(s.Has("kube-system")).To(BeFalse())
	g.Expect(s.Has("")).To(BeFalse())
	g.Expect(s.Cache()).To(HaveLen(2))
	g.Expect(All().Has("kube-system")).To(BeTrue())
	g.Expect(All().Cache()).To(BeNil())
	g.Expect(s.Union(Of("x")).String()).To(Equal("certs,cluster-proxy,x"))
	g.Expect(s.Union(All()).IsAll()).To(BeTrue())
}
