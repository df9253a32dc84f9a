package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
)

func TestCheckAgentIdentity(t *testing.T) {
	agentCert := func(cn string, ous ...string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn, OrganizationalUnit: ous}}
	}
	a := agentCert(contract.AgentCommonNamePrefix+"a", "signer-0123456789abcdef", "agent-namespace:ns-a")
	noNamespace := agentCert(contract.AgentCommonNamePrefix + "a")
	tests := []struct {
		name        string
		cert        *x509.Certificate
		agentIDs    []string
		identifiers []string
		want        AgentIdentity
		wantReason  string
	}{
		{name: "accepts the cluster and its namespaced host", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=a&host=a.ns-a"},
			want: AgentIdentity{Cluster: "a", Namespace: "ns-a", AgentID: "x", Hosts: []string{"a", "a.ns-a"}}},
		{name: "accepts the cluster alone", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=a"},
			want: AgentIdentity{Cluster: "a", Namespace: "ns-a", AgentID: "x", Hosts: []string{"a"}}},
		{name: "accepts a cluster name starting with a digit", cert: agentCert(contract.AgentCommonNamePrefix+"1st", "agent-namespace:ns"),
			agentIDs: []string{"x"}, identifiers: []string{"host=1st.ns"}, want: AgentIdentity{Cluster: "1st", Namespace: "ns", AgentID: "x", Hosts: []string{"1st.ns"}}},
		{name: "refuses another cluster", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=a&host=b"}, wantReason: RefusalForeignIdentifier},
		{name: "refuses another namespace", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=a.other-ns"}, wantReason: RefusalForeignIdentifier},
		{name: "refuses a namespaced host without a namespace in the certificate", cert: noNamespace, agentIDs: []string{"x"},
			identifiers: []string{"host=a.ns-a"}, wantReason: RefusalForeignIdentifier},
		{name: "refuses a prefix of the cluster", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=a.ns-a.evil"}, wantReason: RefusalForeignIdentifier},
		{name: "refuses other identifier types", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=a&ipv4=10.0.0.1"}, wantReason: RefusalIdentifierType},
		{name: "refuses the default route", cert: a, agentIDs: []string{"x"}, identifiers: []string{"default-route=true"}, wantReason: RefusalIdentifierType},
		{name: "refuses no identifiers", cert: a, agentIDs: []string{"x"}, wantReason: RefusalNoIdentifiers},
		{name: "refuses empty identifiers", cert: a, agentIDs: []string{"x"}, identifiers: []string{""}, wantReason: RefusalNoIdentifiers},
		{name: "refuses two identifier sets", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=a", "host=b"}, wantReason: RefusalMalformed},
		{name: "refuses unparsable identifiers", cert: a, agentIDs: []string{"x"}, identifiers: []string{"host=%zz"}, wantReason: RefusalMalformed},
		{name: "refuses a missing agent ID", cert: a, identifiers: []string{"host=a"}, wantReason: RefusalBadAgentID},
		{name: "refuses a certificate that is not an agent's", cert: agentCert("cluster-proxy-proxy-client"), agentIDs: []string{"x"},
			identifiers: []string{"host=a"}, wantReason: RefusalNotAgent},
		{name: "refuses an agent prefix without a cluster", cert: agentCert(contract.AgentCommonNamePrefix), agentIDs: []string{"x"},
			identifiers: []string{"host="}, wantReason: RefusalNotAgent},
		{name: "refuses two agent namespaces", cert: agentCert(contract.AgentCommonNamePrefix+"a", "agent-namespace:n1", "agent-namespace:n2"),
			agentIDs: []string{"x"}, identifiers: []string{"host=a"}, wantReason: RefusalBadCertificate},
		{name: "refuses no certificate", agentIDs: []string{"x"}, identifiers: []string{"host=a"}, wantReason: RefusalNoCertificate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := CheckAgentIdentity(tt.cert, tt.agentIDs, tt.identifiers)
			if tt.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tt.want))
				return
			}
			var ie *IdentityError
			g.Expect(errors.As(err, &ie)).To(BeTrue(), "error %v", err)
			g.Expect(ie.Reason).To(Equal(tt.wantReason))
		})
	}
}

func refusals(reason string) float64 {
	var m dto.Metric
	if err := identityRefusals.WithLabelValues(reason).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func TestAgentEndpointBindsIdentifiersToTheAgentCertificate(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	targetA, targetB := httpTarget(t, "a-apiserver"), httpTarget(t, "b-apiserver")
	ctx := context.Background()

	// Cluster A's certificate claiming B: refused, counted, and B stays unreachable.
	foreign := refusals(RefusalForeignIdentifier)
	_, err := f.agent(t, "a", "ns-a", "agent-1", "host=b", map[string]string{"b:443": targetB})
	g.Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "error %v", err)
	g.Expect(refusals(RefusalForeignIdentifier)).To(Equal(foreign + 1))
	g.Expect(f.srv.Agents().Known("b")).To(BeFalse())
	g.Expect(f.srv.Agents().Known("a")).To(BeFalse())
	_, err = f.srv.DialCluster(ctx, "b", 443)
	g.Expect(err).To(HaveOccurred())

	// Its own cluster name in another namespace: refused.
	_, err = f.agent(t, "a", "ns-a", "agent-1", "host=a.other-ns", map[string]string{"a:443": targetA})
	g.Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "error %v", err)
	g.Expect(refusals(RefusalForeignIdentifier)).To(Equal(foreign + 2))

	// Another identifier type: refused.
	typed := refusals(RefusalIdentifierType)
	_, err = f.agent(t, "a", "ns-a", "agent-1", "host=a&ipv4=127.0.0.1", nil)
	g.Expect(status.Code(err)).To(Equal(codes.PermissionDenied), "error %v", err)
	g.Expect(refusals(RefusalIdentifierType)).To(Equal(typed + 1))

	// A proxy client's certificate on the agent endpoint: refused.
	notAgent := refusals(RefusalNotAgent)
	proxyClient := startTestAgent(t, f.addrs.Agent, f.proxyTL, "agent-1", "host=a", nil)
	g.Expect(status.Code(proxyClient.accepted())).To(Equal(codes.PermissionDenied))
	g.Expect(refusals(RefusalNotAgent)).To(Equal(notAgent + 1))

	// host=<cluster> and host=<cluster>.<namespace from the OU>: accepted, and the cluster is reachable.
	_, err = f.agent(t, "a", "ns-a", "agent-1", "host=a&host=a.ns-a", map[string]string{"a:443": targetA, "a.ns-a:443": targetA})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.srv.Agents().Connected("a")).To(BeTrue())
	for _, host := range []string{"a", "a.ns-a"} {
		conn, err := f.srv.DialCluster(ctx, host, 443)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(get(conn, bufio.NewReader(conn), host, "/")).To(Equal("a-apiserver /"))
		_ = conn.Close()
	}
	_, err = f.srv.DialCluster(ctx, "b", 443)
	g.Expect(err).To(HaveOccurred(), "B is still unreachable")
}

// Agents reach the replicas through one address, so their connections often land on a replica they hold already. The
// server refuses such a stream before registering it: a registered one, being the newest, would take the cluster's
// dials until the agent closed it, and those dials would be lost.
func TestAgentEndpointRefusesTheStreamOfAnAgentThatHoldsThisServerAlready(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	target := httpTarget(t, "a-apiserver")
	_, err := f.agent(t, "a", "ns-a", "agent-1", "host=a", map[string]string{"a:443": target}, "another-server")
	g.Expect(err).NotTo(HaveOccurred(), "an agent holding other servers only is accepted")

	// The same agent again, holding this server: it serves nothing, so a dial routed to it would fail.
	again := startTestAgent(t, f.addrs.Agent, f.agentTL("a", "ns-a"), "agent-1", "host=a", nil, "another-server", f.opts.ServerID)
	err = again.accepted()
	g.Expect(status.Code(err)).To(Equal(codes.AlreadyExists), "error %v", err)
	g.Expect(err.Error()).To(ContainSubstring(f.opts.ServerID))
	for i := range 10 {
		conn, err := f.srv.DialCluster(context.Background(), "a", 443)
		g.Expect(err).NotTo(HaveOccurred(), "dial %d", i+1)
		g.Expect(get(conn, bufio.NewReader(conn), "a", "/")).To(Equal("a-apiserver /"))
		_ = conn.Close()
	}
}

// An agent of another cluster reusing an agent ID must not be able to write into connections served by the agent
// that owns that ID: ANP looks established connections up by agent ID and connection ID alone.
func TestAgentIDsAreScopedToTheirCluster(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	// The target answers only when asked, so the first bytes the client reads are either the answer or the injection.
	targetA := httpTarget(t, "a-apiserver")
	_, err := f.agent(t, "a", "ns-a", "shared-id", "host=a", map[string]string{"a:443": targetA})
	g.Expect(err).NotTo(HaveOccurred())
	intruder, err := f.agent(t, "b", "ns-b", "shared-id", "host=b", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fetchAgents(g, f)).To(HaveKeyWithValue("a", ClusterAgents{Agents: []string{"shared-id"}}))

	conn, err := f.srv.DialCluster(context.Background(), "a", 443)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()

	// A's test agent numbers its connections from 1; the intruder aims at that one.
	g.Expect(intruder.send(&client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{
		Data: &client.Data{ConnectID: 1, Data: []byte("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\ninjected")},
	}})).To(Succeed())
	// The server found no connection of the intruder's and told it to close: the packet was handled, and dropped.
	g.Eventually(intruder.closeReqs).Should(Receive(Equal(int64(1))))
	g.Expect(get(conn, bufio.NewReader(conn), "a", "/genuine")).To(Equal("a-apiserver /genuine"))
}

// The agent endpoint's first SETTINGS ask for an HPACK table of 0 bytes: an agent's few header blocks are not indexed
// and the server keeps no table of them for the connection's life.
func TestAgentEndpointAsksAgentsNotToIndexTheirHeaders(t *testing.T) {
	g := NewWithT(t)
	f := startFixture(t, false, nil, nil)
	cfg := f.agentTL("c1", "cluster-proxy").Clone()
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", f.addrs.Agent, cfg)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = conn.Close() }()
	_, err = io.WriteString(conn, http2.ClientPreface)
	g.Expect(err).NotTo(HaveOccurred())
	fr := http2.NewFramer(conn, conn)
	g.Expect(fr.WriteSettings()).To(Succeed())
	g.Expect(conn.SetReadDeadline(time.Now().Add(10 * time.Second))).To(Succeed())
	for {
		frame, err := fr.ReadFrame()
		g.Expect(err).NotTo(HaveOccurred())
		settings, ok := frame.(*http2.SettingsFrame)
		if !ok || settings.IsAck() {
			continue
		}
		size, ok := settings.Value(http2.SettingHeaderTableSize)
		g.Expect(ok).To(BeTrue(), "the server's SETTINGS name a header table size")
		g.Expect(size).To(BeZero())
		return
	}
}
