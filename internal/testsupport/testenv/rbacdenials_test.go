package testenv

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

func TestRBACDenials(t *testing.T) {
	const denied = `events.events.k8s.io is forbidden: User \"system:serviceaccount:ns:sa\" cannot create resource \"events\" in API group \"events.k8s.io\" in the namespace \"ns\"`
	for _, tc := range []struct {
		name, log string
		want      []string
	}{
		{name: "no denial", log: `{"level":"info","msg":"Starting the manager"}` + "\n" +
			`{"level":"error","msg":"Reconciler error","error":"secrets \"x\" not found"}` + "\n"},
		{name: "a JSON line gives its error, without the stack trace",
			log: `{"level":"info","msg":"Starting the manager"}` + "\n" +
				`{"level":"error","msg":"Server rejected event (will not retry!)","error":"` + denied + `","stacktrace":"a\n\tb"}` + "\n",
			want: []string{strings.ReplaceAll(denied, `\"`, `"`)}},
		{name: "a plain line is kept whole, the last one without a newline too",
			log:  "E1121 reflector.go:1] secrets is forbidden: User \"u\" cannot list resource \"secrets\"\nnext\nsecrets is forbidden: User \"u\" cannot watch",
			want: []string{`E1121 reflector.go:1] secrets is forbidden: User "u" cannot list resource "secrets"`, `secrets is forbidden: User "u" cannot watch`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := rbacDenials(strings.NewReader(tc.log))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}
