package allowlist

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		want    Service
		wantErr string
	}{
		{in: "default/web", want: Service{Namespace: "default", Name: "web"}},
		{in: "monitoring/prometheus:9090", want: Service{Namespace: "monitoring", Name: "prometheus", Port: 9090}},
		{in: "1st-ns/web:1", want: Service{Namespace: "1st-ns", Name: "web", Port: 1}},
		{in: "web", wantErr: "namespace/name"},
		{in: "default/Web", wantErr: "name"},
		{in: "default/1web", wantErr: "name"},
		{in: "Default/web", wantErr: "namespace"},
		{in: "default/web:0", wantErr: "port"},
		{in: "default/web:65536", wantErr: "port"},
		{in: "default/web:http", wantErr: "port"},
		{in: "/web", wantErr: "namespace"},
		{in: "default/web:80,token=optional", want: Service{Namespace: "default", Name: "web", Port: 80, TokenOptional: true}},
		{in: "default/web,token=optional", want: Service{Namespace: "default", Name: "web", TokenOptional: true}},
		{in: "default/web:80,token=required", wantErr: `unknown option "token=required"`},
		{in: "default/web:80,", wantErr: "unknown option"},
		{in: "default/web:http,token=optional", wantErr: "port"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Parse(tc.in)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
			g.Expect(got.String()).To(Equal(tc.in), "String round-trips")
		})
	}
}

func TestAllows(t *testing.T) {
	g := NewWithT(t)
	l, err := ParseAll([]string{"default/web:8080", "monitoring/prometheus"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l.Allows("default", "web", 8080)).To(BeTrue())
	g.Expect(l.Allows("default", "web", 8081)).To(BeFalse(), "only the listed port")
	g.Expect(l.Allows("monitoring", "prometheus", 1)).To(BeTrue(), "no port listed: every port")
	g.Expect(l.Allows("other", "web", 8080)).To(BeFalse())
	g.Expect(List(nil).Allows("default", "web", 80)).To(BeFalse(), "default deny")
	g.Expect(l.AllowsWithoutToken("default", "web", 8080)).To(BeFalse(), "a token is required unless the entry says otherwise")

	open, err := ParseAll([]string{"default/web:8080,token=optional", "default/web", "other/web:80,token=optional"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(open.AllowsWithoutToken("default", "web", 8080)).To(BeTrue())
	g.Expect(open.AllowsWithoutToken("default", "web", 8081)).To(BeFalse(), "listed, but by an entry that wants a token")
	g.Expect(open.Allows("default", "web", 8081)).To(BeTrue())
	g.Expect(open.AllowsWithoutToken("other", "web", 81)).To(BeFalse(), "not listed")

	_, err = ParseAll([]string{"default/web", "bad"})
	g.Expect(err).To(MatchError(ContainSubstring(`"bad"`)))
}
