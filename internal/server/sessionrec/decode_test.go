package sessionrec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/moby/spdystream/spdy"
	. "github.com/onsi/gomega"
)

// found is what a decoder reported.
type found struct {
	out, in strings.Builder
	sizes   []string
}

func (f *found) output(_ time.Duration, data []byte) { f.out.Write(data) }
func (f *found) input(_ time.Duration, data []byte)  { f.in.Write(data) }
func (f *found) resize(_ time.Duration, w, h int) {
	f.sizes = append(f.sizes, fmt.Sprintf("%dx%d", w, h))
}

// decodeInPieces feeds the client's bytes, then the cluster's, piece bytes at a time: frames split anywhere.
func decodeInPieces(t *testing.T, newDecoder func(events) decoder, fromClient, fromCluster []byte, piece int) (*found, error) {
	t.Helper()
	f := &found{}
	d := newDecoder(f)
	for _, stream := range []struct {
		client bool
		b      []byte
	}{{true, bytes.Clone(fromClient)}, {false, bytes.Clone(fromCluster)}} {
		for b := stream.b; len(b) > 0; {
			n := min(piece, len(b))
			if err := d.feed(stream.client, 0, b[:n]); err != nil {
				return f, err
			}
			b = b[n:]
		}
	}
	return f, nil
}

var pieceSizes = []int{1, 2, 3, 5, 7, 8, 9, 13, 64, 1000, 1 << 20}

func TestSPDYDecoderReadsFramesSplitAnywhere(t *testing.T) {
	g := NewWithT(t)
	var client, cluster bytes.Buffer
	clientFramer, err := spdy.NewFramer(&client, nil)
	g.Expect(err).NotTo(HaveOccurred())
	clusterFramer, err := spdy.NewFramer(&cluster, nil)
	g.Expect(err).NotTo(HaveOccurred())
	streams := []struct {
		id  spdy.StreamId
		typ string
	}{{1, "error"}, {3, "stdin"}, {5, "stdout"}, {7, "stderr"}, {9, "resize"}}
	for _, s := range streams {
		// The headers client-go sends; each header block compressed in the client's zlib context.
		g.Expect(clientFramer.WriteFrame(&spdy.SynStreamFrame{StreamId: s.id, Headers: http.Header{
			"streamType": {s.typ}, "port": {"0"}, "requestID": {"0"}}})).To(Succeed())
		g.Expect(clusterFramer.WriteFrame(&spdy.SynReplyFrame{StreamId: s.id, Headers: http.Header{"streamType": {s.typ}}})).To(Succeed())
	}
	write := func(f *spdy.Framer, frame spdy.Frame) { g.Expect(f.WriteFrame(frame)).To(Succeed()) }
	write(clientFramer, &spdy.DataFrame{StreamId: 3, Data: []byte("ls -l\n")})
	write(clientFramer, &spdy.PingFrame{Id: 1})
	write(clientFramer, &spdy.DataFrame{StreamId: 9, Data: []byte(`{"Width":100,`)})
	write(clientFramer, &spdy.DataFrame{StreamId: 9, Data: []byte(`"Height":30}` + "\n" + `{"Width":120,"Height":40}` + "\n")})
	write(clientFramer, &spdy.DataFrame{StreamId: 3, Flags: spdy.DataFlagFin})
	write(clusterFramer, &spdy.PingFrame{Id: 1})
	write(clusterFramer, &spdy.DataFrame{StreamId: 5, Data: []byte("total 0\n")})
	write(clusterFramer, &spdy.WindowUpdateFrame{StreamId: 5, DeltaWindowSize: 100})
	write(clusterFramer, &spdy.DataFrame{StreamId: 7, Data: []byte("ls: warning\n")})
	write(clusterFramer, &spdy.DataFrame{StreamId: 5, Data: bytes.Repeat([]byte("z"), 70000)})
	// A header block late in the stream: the cluster's zlib context has to have seen all the others.
	write(clusterFramer, &spdy.HeadersFrame{StreamId: 5, Headers: http.Header{"x-late": {"yes"}}})
	write(clusterFramer, &spdy.DataFrame{StreamId: 5, Data: []byte("done\n"), Flags: spdy.DataFlagFin})
	write(clusterFramer, &spdy.DataFrame{StreamId: 1, Data: []byte(`{"status":"Success"}`)})
	write(clusterFramer, &spdy.RstStreamFrame{StreamId: 3, Status: spdy.Cancel})
	write(clusterFramer, &spdy.GoAwayFrame{Status: spdy.GoAwayOK})

	for _, piece := range pieceSizes {
		f, err := decodeInPieces(t, func(ev events) decoder { return newSPDYDecoder(ev) }, client.Bytes(), cluster.Bytes(), piece)
		g.Expect(err).NotTo(HaveOccurred(), "pieces of %d", piece)
		g.Expect(f.out.String() == "total 0\nls: warning\n"+strings.Repeat("z", 70000)+"done\n").To(BeTrue(), "pieces of %d", piece)
		g.Expect(f.in.String()).To(Equal("ls -l\n"), "pieces of %d", piece)
		g.Expect(f.sizes).To(Equal([]string{"100x30", "120x40"}), "pieces of %d", piece)
	}
}

func TestSPDYDecoderRefusesACorruptHeaderBlock(t *testing.T) {
	g := NewWithT(t)
	var client bytes.Buffer
	framer, err := spdy.NewFramer(&client, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(framer.WriteFrame(&spdy.SynStreamFrame{StreamId: 1, Headers: http.Header{"streamType": {"stdin"}}})).To(Succeed())
	b := client.Bytes()
	b[8+10] ^= 0xff // the zlib header of the header block, after the frame header and the stream IDs
	_, err = decodeInPieces(t, func(ev events) decoder { return newSPDYDecoder(ev) }, b, nil, len(b))
	g.Expect(err).To(MatchError(ContainSubstring("SPDY control frame")))
}

// wsFrame is one RFC 6455 frame; mask is nil for the cluster's.
func wsFrame(fin bool, opcode byte, payload []byte, mask []byte) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	var maskBit byte
	if mask != nil {
		maskBit = 0x80
	}
	frame := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		frame = append(frame, maskBit|byte(n))
	case n <= 0xffff:
		frame = append(frame, maskBit|126)
		frame = binary.BigEndian.AppendUint16(frame, uint16(n))
	default:
		frame = append(frame, maskBit|127)
		frame = binary.BigEndian.AppendUint64(frame, uint64(n))
	}
	if mask == nil {
		return append(frame, payload...)
	}
	frame = append(frame, mask...)
	for i, c := range payload {
		frame = append(frame, c^mask[i%4])
	}
	return frame
}

func TestWebSocketDecoderReadsFragmentedMessagesSplitAnywhere(t *testing.T) {
	mask := []byte{0x37, 0xfa, 0x21, 0x3d}
	const resize = `{"Width":100,"Height":30}`
	big := bytes.Repeat([]byte("y"), 70000)
	for _, tc := range []struct {
		name   string
		base64 bool // text messages, the channel a digit and the data base64
	}{{"channel.k8s.io", false}, {"base64.channel.k8s.io", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			opcode := byte(2)
			message := func(channel byte, data []byte) []byte { return append([]byte{channel}, data...) }
			if tc.base64 {
				opcode = 1
				message = func(channel byte, data []byte) []byte {
					return append([]byte{'0' + channel}, base64.StdEncoding.EncodeToString(data)...)
				}
			}
			var client, cluster []byte
			stdin := message(channelStdin, []byte("ls -l\n"))
			// One message in three frames, a ping between them, cut inside a base64 quantum.
			client = append(client, wsFrame(false, opcode, stdin[:3], mask)...)
			client = append(client, wsFrame(true, 9, []byte("ping"), mask)...)
			client = append(client, wsFrame(false, 0, stdin[3:6], mask)...)
			client = append(client, wsFrame(true, 0, stdin[6:], mask)...)
			client = append(client, wsFrame(true, opcode, message(channelResize, []byte(resize)), mask)...)
			if !tc.base64 {
				client = append(client, wsFrame(true, 2, []byte{255, channelStdin}, mask)...) // v5: stdin closed
			}
			client = append(client, wsFrame(true, 8, []byte{3, 232}, mask)...)
			cluster = append(cluster, wsFrame(true, opcode, message(channelStdout, nil), nil)...) // streams are open
			cluster = append(cluster, wsFrame(true, opcode, message(channelStdout, bytes.Repeat([]byte("x"), 200)), nil)...)
			cluster = append(cluster, wsFrame(true, 10, nil, nil)...)
			cluster = append(cluster, wsFrame(true, opcode, message(channelStderr, []byte("warning\n")), nil)...)
			cluster = append(cluster, wsFrame(true, opcode, message(channelStdout, big), nil)...)
			cluster = append(cluster, wsFrame(true, opcode, message(3, []byte(`{"status":"Success"}`)), nil)...)
			cluster = append(cluster, wsFrame(true, 8, nil, nil)...)

			for _, piece := range pieceSizes {
				f, err := decodeInPieces(t, func(ev events) decoder { return newWebSocketDecoder(ev, tc.base64) }, client, cluster, piece)
				g.Expect(err).NotTo(HaveOccurred(), "pieces of %d", piece)
				g.Expect(f.out.String() == strings.Repeat("x", 200)+"warning\n"+string(big)).To(BeTrue(), "pieces of %d", piece)
				g.Expect(f.in.String()).To(Equal("ls -l\n"), "pieces of %d", piece)
				g.Expect(f.sizes).To(Equal([]string{"100x30"}), "pieces of %d", piece)
			}
		})
	}
}

func TestWebSocketDecoderRefusesWhatItCannotRead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame []byte
		want  string
	}{
		{"a compressed frame", append([]byte{0x80 | 0x40 | 2, 1}, 1), "reserved bits"},
		{"a continuation outside a message", wsFrame(true, 0, []byte{1}, nil), "continuation frame outside a message"},
		{"an unknown opcode", wsFrame(true, 3, nil, nil), "opcode 3"},
		{"a message inside a fragmented one", append(wsFrame(false, 2, []byte{1}, nil), wsFrame(true, 2, []byte{1}, nil)...), "inside a fragmented one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeInPieces(t, func(ev events) decoder { return newWebSocketDecoder(ev, false) }, nil, tc.frame, 1)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tc.want)))
		})
	}
}

func TestProtocolOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    Protocol
		ok      bool
	}{
		{"SPDY v4", map[string]string{"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}, SPDY, true},
		{"SPDY v5", map[string]string{"Upgrade": "spdy/3.1", "X-Stream-Protocol-Version": "v5.channel.k8s.io"}, SPDY, true},
		{"SPDY unversioned", map[string]string{"Upgrade": "SPDY/3.1"}, SPDY, true},
		{"SPDY port-forward", map[string]string{"Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "portforward.k8s.io"}, 0, false},
		{"websocket v5", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "v5.channel.k8s.io"}, WebSocket, true},
		{"websocket v4", map[string]string{"Upgrade": "WebSocket", "Sec-WebSocket-Protocol": "v4.channel.k8s.io"}, WebSocket, true},
		{"websocket unversioned", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "channel.k8s.io"}, WebSocket, true},
		{"websocket without a subprotocol", map[string]string{"Upgrade": "websocket"}, WebSocket, true},
		{"websocket base64", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "base64.channel.k8s.io"}, WebSocketBase64, true},
		{"websocket v4 base64", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "v4.base64.channel.k8s.io"}, WebSocketBase64, true},
		{"websocket port-forward", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "v4.portforward.k8s.io"}, 0, false},
		{"websocket tunnelling SPDY", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "SPDY/3.1+portforward.k8s.io"}, 0, false},
		{"websocket compressed", map[string]string{"Upgrade": "websocket", "Sec-WebSocket-Protocol": "v5.channel.k8s.io",
			"Sec-WebSocket-Extensions": "permessage-deflate"}, 0, false},
		{"h2c", map[string]string{"Upgrade": "h2c"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{}}
			for k, v := range tc.headers {
				res.Header.Set(k, v)
			}
			p, ok := ProtocolOf(res)
			NewWithT(t).Expect([]any{p, ok}).To(Equal([]any{tc.want, tc.ok}))
		})
	}
	_, ok := ProtocolOf(&http.Response{StatusCode: http.StatusOK, Header: http.Header{"Upgrade": {"SPDY/3.1"}}})
	NewWithT(t).Expect(ok).To(BeFalse(), "not an upgrade")
}
