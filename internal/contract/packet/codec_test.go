package packet

import (
	"math"
	"testing"

	. "github.com/onsi/gomega"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/memtest"
)

// payload is n bytes that differ from their neighbours and from other sizes' payloads.
func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31 + n)
	}
	return b
}

func dataPacket(b []byte) *client.Packet {
	return &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: 7, Data: b}}}
}

func marshal(t testing.TB, pkt *client.Packet) []byte {
	t.Helper()
	b, err := proto.Marshal(pkt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// split cuts b into pieces of at most n bytes, as gRPC hands over a message that spans several frames.
func split(b []byte, n int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		k := min(n, len(b))
		s = append(s, mem.SliceBuffer(append([]byte(nil), b[:k]...)))
		b = b[k:]
	}
	return s
}

func TestCodecDecodesDataPacketsAsProtobufDoes(t *testing.T) {
	g := NewWithT(t)
	codec := NewCodec()
	for _, connID := range []int64{0, 1, 1 << 40, math.MaxInt64, -5} {
		for _, size := range []int{0, 1, 100, 16<<10 + 1, payloadBufferSize - 64} {
			data := payload(size)
			want := &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: connID, Data: data}}}
			wire := marshal(t, want)

			for _, frame := range []int{7, 16 << 10, len(wire) + 1} {
				got := &client.Packet{}
				g.Expect(codec.Unmarshal(split(wire, frame), got)).To(Succeed())
				g.Expect(proto.Equal(got, want)).To(BeTrue(), "connID %d, %d bytes through the codec in pieces of %d", connID, size, frame)
				if c := cap(got.GetData().Data); size <= smallPayload {
					// A small payload gets an allocation of its own size, not a pooled 32 KiB buffer.
					g.Expect(c).To(BeNumerically("<", 2*size+16), "connID %d, %d bytes: allocated to size", connID, size)
				} else {
					g.Expect(c).To(BeElementOf(16<<10, 32<<10), "connID %d, %d bytes: a pooled buffer", connID, size)
					g.Expect(c).To(BeNumerically("<=", 4*size), "connID %d, %d bytes: a pooled buffer that fits", connID, size)
				}
				ReleasePayload(got.GetData().Data)
			}
		}
	}
}

func TestCodecReusesPayloadBuffersWithoutMixingThemUp(t *testing.T) {
	g := NewWithT(t)
	codec := NewCodec()
	var held [][]byte
	var want [][]byte
	for i := range 50 {
		data := payload(1000 + i*600)
		pkt := &client.Packet{}
		g.Expect(codec.Unmarshal(split(marshal(t, dataPacket(data)), 16<<10), pkt)).To(Succeed())
		held, want = append(held, pkt.GetData().Data), append(want, data)
		if i%3 == 0 { // some are read and handed back while others wait
			ReleasePayload(held[0])
			held, want = held[1:], want[1:]
		}
		for j := range held {
			g.Expect(held[j]).To(Equal(want[j]), "a payload still held changed")
		}
	}
	// A payload handed back is decoded into again: a packet and its release cost a little, not a new 20 KiB buffer.
	in := split(marshal(t, dataPacket(payload(20<<10))), 16<<10)
	pkt := &client.Packet{}
	perRun := memtest.BytesPerRun(100, func() {
		if err := codec.Unmarshal(in, pkt); err != nil {
			t.Fatal(err)
		}
		ReleasePayload(pkt.GetData().Data)
	})
	if memtest.PoolsReuse {
		g.Expect(perRun).To(BeNumerically("<", 1<<10), "bytes allocated per decoded and released 20 KiB packet")
	}
}

func TestCodecDoesNotTakeLargeBuffersForSmallDataPackets(t *testing.T) {
	g := NewWithT(t)
	codec := NewCodec()
	// The gRPC and HTTP-CONNECT frontends never hand payloads back: a 100-byte packet costs about what protobuf's
	// own decoding allocates.
	in := split(marshal(t, dataPacket(payload(100))), 16<<10)
	perRun := memtest.BytesPerRun(100, func() {
		if err := codec.Unmarshal(in, &client.Packet{}); err != nil {
			t.Fatal(err)
		}
	})
	g.Expect(perRun).To(BeNumerically("<", 1<<10), "bytes allocated per decoded 100-byte packet")
}

func TestPooledDecodingLeavesUnusualLayoutsToTheOtherPaths(t *testing.T) {
	g := NewWithT(t)
	body := []byte("payload")
	dataMsg := func(fields ...[]byte) []byte { // a Data message from raw fields, in the order given
		var b []byte
		for _, f := range fields {
			b = append(b, f...)
		}
		return b
	}
	connField := protowire.AppendVarint(protowire.AppendTag(nil, dataConnectField, protowire.VarintType), 9)
	dataField := protowire.AppendBytes(protowire.AppendTag(nil, dataDataField, protowire.BytesType), body)
	packet := func(data []byte, trailer ...byte) []byte {
		b := protowire.AppendVarint(protowire.AppendTag(nil, packetTypeField, protowire.VarintType), uint64(client.PacketType_DATA))
		b = protowire.AppendBytes(protowire.AppendTag(b, packetDataField, protowire.BytesType), data)
		return append(b, trailer...)
	}
	for name, wire := range map[string][]byte{
		"payload before the connection ID": packet(dataMsg(dataField, connField)),
		"a field after Data":               packet(dataMsg(connField, dataField), protowire.AppendVarint(protowire.AppendTag(nil, packetTypeField, protowire.VarintType), 4)...),
		"a payload over the pool's size":   marshal(t, dataPacket(make([]byte, payloadBufferSize+1))),
		"no payload":                       packet(dataMsg(connField)),
	} {
		g.Expect(decodePooledData(split(wire, 5), &client.Packet{})).To(BeFalse(), name)
		want := &client.Packet{}
		g.Expect(proto.Unmarshal(wire, want)).To(Succeed(), name)
		got := &client.Packet{}
		g.Expect(NewCodec().Unmarshal(split(wire, 5), got)).To(Succeed(), name)
		g.Expect(proto.Equal(got, want)).To(BeTrue(), name)
	}
	// Without a connection ID (zero is not written) the payload is still pooled.
	got := &client.Packet{}
	g.Expect(decodePooledData(split(packet(dataMsg(dataField)), 3), got)).To(BeTrue())
	g.Expect(got.GetData().ConnectID).To(BeZero())
	g.Expect(got.GetData().Data).To(Equal(body))
}

func TestCodecLeavesEveryOtherPacketToProtobuf(t *testing.T) {
	g := NewWithT(t)
	codec := NewCodec()
	withUnknownField := protowire.AppendTag(marshal(t, dataPacket([]byte("x"))), 15, protowire.VarintType)
	withUnknownField = protowire.AppendVarint(withUnknownField, 1)
	repeatedType := protowire.AppendVarint(protowire.AppendTag(marshal(t, dataPacket([]byte("x"))), 1, protowire.VarintType), 4)
	for name, wire := range map[string][]byte{
		"DIAL_RSP":           marshal(t, DialResponse(42, 7, "")),
		"CLOSE_RSP":          marshal(t, CloseResponse(7, "")),
		"DATA with an error": marshal(t, &client.Packet{Type: client.PacketType_DATA, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: 3, Error: "broken"}}}),
		"DATA without data":  marshal(t, &client.Packet{Type: client.PacketType_DATA}),
		"an unknown field":   withUnknownField,
		"a repeated field":   repeatedType,
	} {
		g.Expect(decodePooledData(split(wire, 7), &client.Packet{})).To(BeFalse(), name)
		want := &client.Packet{}
		g.Expect(proto.Unmarshal(wire, want)).To(Succeed(), name)
		got := &client.Packet{}
		g.Expect(codec.Unmarshal(split(wire, 7), got)).To(Succeed(), name)
		g.Expect(proto.Equal(got, want)).To(BeTrue(), name)
	}
	g.Expect(codec.Unmarshal(split([]byte{0x22, 0x05, 0x08}, 16), &client.Packet{})).To(HaveOccurred(), "truncated")
	g.Expect(codec.Name()).To(Equal("proto"))
}

func FuzzDecodePooledData(f *testing.F) {
	f.Add(marshal(f, dataPacket([]byte("hello"))), uint8(5))
	f.Add(marshal(f, DialResponse(1, 0, "refused")), uint8(1))
	f.Add([]byte{0x08, 0x04, 0x22, 0x00}, uint8(2))
	f.Fuzz(func(t *testing.T, wire []byte, frame uint8) {
		want := &client.Packet{}
		protoErr := proto.Unmarshal(wire, want)
		got := &client.Packet{}
		if !decodePooledData(split(wire, int(frame)+1), got) {
			return
		}
		if protoErr != nil {
			t.Fatalf("decoded what protobuf refuses: %v", protoErr)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("decoded %v, protobuf %v", got, want)
		}
	})
}
