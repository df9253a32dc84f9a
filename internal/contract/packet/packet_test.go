package packet

import (
	"testing"

	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// Each packet's type matches its payload and the fields survive the wire, as konnectivity-client and ANP's agent read
// them.
func TestPacketsCarryTheirTypeAndFieldsOverTheWire(t *testing.T) {
	g := NewWithT(t)
	for _, tt := range []struct {
		pkt   *client.Packet
		typ   client.PacketType
		check func(*client.Packet)
	}{
		{DialRequest("c1:443", 7), client.PacketType_DIAL_REQ, func(p *client.Packet) {
			g.Expect(p.GetDialRequest().GetProtocol()).To(Equal("tcp"))
			g.Expect(p.GetDialRequest().GetAddress()).To(Equal("c1:443"))
			g.Expect(p.GetDialRequest().GetRandom()).To(BeEquivalentTo(7))
		}},
		{DialResponse(7, 3, "refused"), client.PacketType_DIAL_RSP, func(p *client.Packet) {
			g.Expect(p.GetDialResponse().GetRandom()).To(BeEquivalentTo(7))
			g.Expect(p.GetDialResponse().GetConnectID()).To(BeEquivalentTo(3))
			g.Expect(p.GetDialResponse().GetError()).To(Equal("refused"))
		}},
		{CloseDial(7), client.PacketType_DIAL_CLS, func(p *client.Packet) {
			g.Expect(p.GetCloseDial().GetRandom()).To(BeEquivalentTo(7))
		}},
		{CloseRequest(3), client.PacketType_CLOSE_REQ, func(p *client.Packet) {
			g.Expect(p.GetCloseRequest().GetConnectID()).To(BeEquivalentTo(3))
		}},
		{CloseResponse(3, "gone"), client.PacketType_CLOSE_RSP, func(p *client.Packet) {
			g.Expect(p.GetCloseResponse().GetConnectID()).To(BeEquivalentTo(3))
			g.Expect(p.GetCloseResponse().GetError()).To(Equal("gone"))
		}},
		{Drain(), client.PacketType_DRAIN, func(p *client.Packet) {
			g.Expect(p.GetDrain()).NotTo(BeNil())
		}},
	} {
		raw, err := proto.Marshal(tt.pkt)
		g.Expect(err).NotTo(HaveOccurred())
		var got client.Packet
		g.Expect(proto.Unmarshal(raw, &got)).To(Succeed())
		g.Expect(got.GetType()).To(Equal(tt.typ))
		tt.check(&got)
	}
}
