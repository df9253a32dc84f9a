package contract

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
)

func TestCheckAgentIdentifiers(t *testing.T) {
	for _, tt := range []struct {
		name, namespace, identifiers, wantReason string
	}{
		{name: "accepts the cluster and its agent namespace", namespace: "ns", identifiers: "host=c1&host=c1.ns"},
		{name: "accepts the cluster alone", namespace: "ns", identifiers: "host=c1"},
		{name: "accepts the cluster without a namespace", identifiers: "host=c1"},
		{name: "refuses another namespace", namespace: "ns", identifiers: "host=c1&host=c1.other", wantReason: IdentifierForeign},
		{name: "refuses a namespace the certificate does not name", identifiers: "host=c1.ns", wantReason: IdentifierForeign},
		{name: "refuses a name under the namespace", namespace: "ns", identifiers: "host=c1.ns.evil", wantReason: IdentifierForeign},
		{name: "refuses another cluster", namespace: "ns", identifiers: "host=c1&host=c2", wantReason: IdentifierForeign},
		{name: "refuses an empty host", namespace: "ns", identifiers: "host=", wantReason: IdentifierForeign},
		{name: "refuses other identifier types", namespace: "ns", identifiers: "host=c1&ipv4=10.0.0.1", wantReason: IdentifierType},
		{name: "refuses the default route", namespace: "ns", identifiers: "default-route=true", wantReason: IdentifierType},
		{name: "refuses no identifiers", namespace: "ns", identifiers: "", wantReason: IdentifiersMissing},
		{name: "refuses unparsable identifiers", namespace: "ns", identifiers: "host=%zz", wantReason: IdentifiersMalformed},
	} {
		g := NewWithT(t)
		_, err := CheckAgentIdentifiers("c1", tt.namespace, tt.identifiers)
		if tt.wantReason == "" {
			g.Expect(err).NotTo(HaveOccurred(), tt.name)
			continue
		}
		var ie *IdentifierError
		g.Expect(errors.As(err, &ie)).To(BeTrue(), tt.name)
		g.Expect(ie.Reason).To(Equal(tt.wantReason), tt.name)
	}
}

func TestAgentIdentifierHostsAreTheHostsInOrder(t *testing.T) {
	g := NewWithT(t)
	hosts, err := AgentIdentifierHosts("host=c1&host=c1.ns")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hosts).To(Equal([]string{"c1", "c1.ns"}))
}
