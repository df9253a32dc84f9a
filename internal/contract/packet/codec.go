package packet

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// Codec is gRPC's protobuf codec with a shorter way in for DATA packets, which carry nearly all the bytes of the
// data plane: the proxy-server decodes agents' packets with it, and the agent the hub's. gRPC's codec copies a
// message that spans several HTTP/2 frames (anything over 16 KiB) into one pooled buffer, and protobuf then copies the
// payload out of it into a new allocation; here the payload is copied once, into a buffer that fits it (see
// newPayload), which its reader hands back with ReleasePayload once it has written it on (the in-process tunnel, the
// agent's endpoints; the gRPC and HTTP-CONNECT frontends leave theirs to the garbage collector). Any other packet, and
// a DATA packet with anything unusual in it (an error text, no payload, more than 32 KiB, unknown or repeated
// fields), goes through protobuf.
type Codec struct{ encoding.CodecV2 }

// NewCodec returns the codec, for grpc.ForceServerCodecV2 or grpc.ForceCodecV2.
func NewCodec() Codec { return Codec{encoding.GetCodecV2(grpcproto.Name)} }

func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	pkt, ok := v.(*client.Packet)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	if decodePooledData(data, pkt) {
		return nil
	}
	if err := proto.Unmarshal(data.Materialize(), pkt); err != nil {
		return fmt.Errorf("unmarshal a packet: %w", err)
	}
	return nil
}

// Packet and Data field numbers, from konnectivity-client's client.proto.
const (
	packetTypeField  = 1
	packetDataField  = 4
	dataConnectField = 1
	dataDataField    = 3
)

// payloadBufferSize is the largest payload decodePooledData takes: agents and in-process tunnels send at most 32 KiB
// per packet.
const payloadBufferSize = 32 << 10

// smallPayload is the largest payload that gets an allocation of its own size, as protobuf would make it. Larger ones
// come from Buffers, in 8, 16 or 32 KiB buffers: at most twice the payload, and reused once
// handed back, while a small payload never takes a buffer much larger than itself, since the gRPC and HTTP-CONNECT
// frontends do not hand theirs back.
const smallPayload = 4 << 10

// newPayload returns a buffer of n bytes, n at most payloadBufferSize, for a DATA payload.
func newPayload(n int) []byte {
	if n <= smallPayload {
		return make([]byte, n)
	}
	return *Buffers.Get(n)
}

// ReleasePayload hands a DATA payload back to the pool once nothing refers to it any more. Only the capacities
// newPayload takes from the pool are kept; other payloads are left to the garbage collector.
func ReleasePayload(b []byte) {
	if c := cap(b); c > smallPayload && c <= payloadBufferSize && c&(c-1) == 0 {
		Buffers.Put(&b)
	}
}

// decodePooledData fills pkt from data if it is a DATA packet laid out as protobuf writes it (type, then Data with an
// optional connection ID, then the payload, which ends the message) with a payload of at most payloadBufferSize
// bytes; the payload goes into a buffer from newPayload. It reports false, leaving pkt alone, for anything else.
func decodePooledData(data mem.BufferSlice, pkt *client.Packet) bool {
	total := data.Len()
	var prefix [32]byte // the tags and varints ahead of the payload take at most 2+1+3+1+10+1+3 bytes
	have := copyRange(data, 0, prefix[:min(total, len(prefix))])
	b := prefix[:have]
	consumed := func() int { return have - len(b) }
	field := func(num protowire.Number, typ protowire.Type) bool {
		n, t, k := protowire.ConsumeTag(b)
		if k < 0 || n != num || t != typ {
			return false
		}
		b = b[k:]
		return true
	}
	varint := func() (uint64, bool) {
		v, k := protowire.ConsumeVarint(b)
		if k < 0 {
			return 0, false
		}
		b = b[k:]
		return v, true
	}
	if !field(packetTypeField, protowire.VarintType) {
		return false
	}
	if typ, ok := varint(); !ok || typ != uint64(client.PacketType_DATA) || !field(packetDataField, protowire.BytesType) {
		return false
	}
	if l, ok := varint(); !ok || l != uint64(total-consumed()) {
		return false // Data does not end the message
	}
	var connID uint64
	if n, t, k := protowire.ConsumeTag(b); k > 0 && n == dataConnectField && t == protowire.VarintType {
		b = b[k:]
		var ok bool
		if connID, ok = varint(); !ok {
			return false
		}
	}
	if !field(dataDataField, protowire.BytesType) {
		return false
	}
	n, ok := varint()
	if !ok || n == 0 || n > payloadBufferSize || uint64(consumed())+n != uint64(total) {
		return false // no payload, too large for the pool, or something follows it
	}
	payload := newPayload(int(n))
	copyRange(data, consumed(), payload)
	pkt.Reset()
	pkt.Type = client.PacketType_DATA
	pkt.Payload = &client.Packet_Data{Data: &client.Data{ConnectID: int64(connID), Data: payload}} //nolint:gosec // int64 on the wire
	return true
}

// copyRange copies data's bytes from offset on into dst and returns how many it copied.
func copyRange(data mem.BufferSlice, offset int, dst []byte) int {
	n := 0
	for _, buf := range data {
		b := buf.ReadOnlyData()
		if offset >= len(b) {
			offset -= len(b)
			continue
		}
		n += copy(dst[n:], b[offset:])
		offset = 0
		if n == len(dst) {
			break
		}
	}
	return n
}
