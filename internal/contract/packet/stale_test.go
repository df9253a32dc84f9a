package packet

import (
	"bytes"
	"testing"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/memtest"
)

// spoil fills the buffer the pool hands out next for an n-byte payload, to its whole capacity, with bytes that differ
// at every position from want's (and from zero beyond it), as a buffer another stream released would be at worst. It
// returns that buffer's first byte, to tell whether the decoding took it.
func spoil(want []byte) *byte {
	b := Buffers.Get(len(want))
	whole := (*b)[:cap(*b)]
	for i := range whole {
		if i < len(want) {
			whole[i] = ^want[i]
		} else {
			whole[i] = 0xA5
		}
	}
	first := &whole[0]
	Buffers.Put(b)
	return first
}

// decodeAfterSpoiling decodes want's DATA packet, cut into frames of frame bytes, into the buffer spoil prepared, and
// fails t unless the payload is want, byte for byte. It reports whether the payload took the spoiled buffer.
func decodeAfterSpoiling(t *testing.T, want []byte, frame int) (reused bool) {
	t.Helper()
	var spoiled *byte
	if len(want) > smallPayload {
		spoiled = spoil(want)
	}
	pkt := &client.Packet{}
	if err := NewCodec().Unmarshal(split(marshal(t, dataPacket(want)), frame), pkt); err != nil {
		t.Fatal(err)
	}
	got := pkt.GetData().GetData()
	if !bytes.Equal(got, want) {
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("a %d-byte payload in frames of %d: byte %d is %#x, sent %#x (a stale byte of the pooled buffer)", len(want), frame, i, got[i], want[i])
			}
		}
		t.Fatalf("a %d-byte payload in frames of %d came out as %d bytes", len(want), frame, len(got))
	}
	reused = spoiled != nil && len(got) > 0 && &got[:1][0] == spoiled
	ReleasePayload(got)
	return reused
}

// TestAPayloadNeverShowsTheBytesOfTheBufferItReuses: every size the pool serves, cut into frames as gRPC hands them
// over, decodes into a buffer whose every byte was made to differ from the one expected there, and comes out exactly
// as sent. A byte the decoding did not write, that is, another stream's, would show.
func TestAPayloadNeverShowsTheBytesOfTheBufferItReuses(t *testing.T) {
	reused := 0
	for _, n := range []int{smallPayload + 1, 8<<10 - 1, 8 << 10, 8<<10 + 1, 16<<10 - 3, 16 << 10, 16<<10 + 1, 24 << 10, payloadBufferSize - 1, payloadBufferSize} {
		for _, frame := range []int{1, 7, 4 << 10, 16 << 10, 64 << 10} {
			if decodeAfterSpoiling(t, payload(n), frame) {
				reused++
			}
		}
	}
	if memtest.PoolsReuse && !poisonReleased && reused == 0 {
		t.Fatal("no decoding took a spoiled buffer: the test proved nothing")
	}
}

// FuzzAPayloadHoldsOnlyItsOwnBytes: payloads of any content and size, cut into frames of any size, decode into
// spoiled buffers (see spoil) and come out exactly as sent.
func FuzzAPayloadHoldsOnlyItsOwnBytes(f *testing.F) {
	f.Add([]byte("tenant a"), uint16(20000), uint16(9000), uint8(7))
	f.Add([]byte{0, 0xFF}, uint16(32768), uint16(4097), uint8(255))
	f.Add([]byte{}, uint16(5000), uint16(32767), uint8(0))
	f.Fuzz(func(t *testing.T, content []byte, first, second uint16, frame uint8) {
		for _, n := range []int{int(first), int(second)} {
			n %= payloadBufferSize + 1
			want := make([]byte, n)
			for i := range want {
				if len(content) > 0 {
					want[i] = content[i%len(content)]
				} else {
					want[i] = byte(i)
				}
			}
			if n > 0 {
				decodeAfterSpoiling(t, want, int(frame)+1)
			}
		}
	})
}
