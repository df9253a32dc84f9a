package sessionrec

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/moby/spdystream/spdy"
)

// decoder reads the remote command streams out of a connection's two directions. Both directions are fed by one
// goroutine, in the order the tap saw them, so a decoder needs no lock: a stream the client opens is known before
// the cluster's first byte on it.
type decoder interface {
	// feed decodes the next bytes of one direction. It may change p (a websocket client's payloads are unmasked in
	// place).
	feed(fromClient bool, at time.Duration, p []byte) error
}

// events receives what a decoder found.
type events interface {
	output(at time.Duration, data []byte)
	input(at time.Duration, data []byte)
	resize(at time.Duration, width, height int)
}

// The remote command streams, as SPDY names them in the streamType header and websocket numbers its channels.
const (
	channelStdin  = 0
	channelStdout = 1
	channelStderr = 2
	channelResize = 4
)

var spdyStreamChannels = map[string]int{"stdin": channelStdin, "stdout": channelStdout, "stderr": channelStderr, "resize": channelResize}

// deliver sends the data of a channel where it belongs: output from the cluster, input and resizes from the client.
func deliver(ev events, resizes *resizeReader, fromClient bool, channel int, at time.Duration, data []byte) {
	switch {
	case !fromClient && (channel == channelStdout || channel == channelStderr):
		ev.output(at, data)
	case fromClient && channel == channelStdin:
		ev.input(at, data)
	case fromClient && channel == channelResize:
		resizes.feed(ev, at, data)
	}
}

// resizeReader reads the JSON terminal sizes ({"Width":80,"Height":24}) of the resize stream, whatever pieces they
// come in.
type resizeReader struct{ buf []byte }

// maxResize bounds what is kept of a size that does not end: a resize is some 30 bytes.
const maxResize = 1 << 10

func (r *resizeReader) feed(ev events, at time.Duration, p []byte) {
	r.buf = append(r.buf, p...)
	for {
		end := bytes.IndexByte(r.buf, '}')
		if end < 0 {
			if len(r.buf) > maxResize {
				r.buf = r.buf[:0]
			}
			return
		}
		var size struct{ Width, Height uint16 }
		if json.Unmarshal(r.buf[:end+1], &size) == nil {
			ev.resize(at, int(size.Width), int(size.Height))
		}
		r.buf = append(r.buf[:0], r.buf[end+1:]...)
	}
}

// spdyDecoder reads SPDY/3.1 frames. Data frames it reads itself; control frames with a header block go to the
// spdystream framer of their direction, whose zlib context must see every header block of that direction in order.
type spdyDecoder struct {
	ev      events
	dirs    [2]spdyDirection // the cluster's, the client's
	streams map[uint32]int   // channels of the streams the client opened, by stream ID
	resizes resizeReader
}

type spdyDirection struct {
	header  [8]byte
	headerN int
	// A data frame being read.
	dataStream uint32
	dataLeft   int
	// A control frame being gathered, or skipped.
	control     []byte
	controlLeft int
	skip        bool
	frame       frameReader
	framer      *spdy.Framer
}

// maxSPDYControlFrame bounds a control frame gathered whole; remote command streams send a few hundred bytes.
const maxSPDYControlFrame = 1 << 20

// The SPDY control frames that carry a compressed header block.
const (
	spdySynStream = 1
	spdySynReply  = 2
	spdyHeaders   = 8
)

func newSPDYDecoder(ev events) *spdyDecoder {
	d := &spdyDecoder{ev: ev, streams: map[uint32]int{}}
	for i := range d.dirs {
		dir := &d.dirs[i]
		dir.framer, _ = spdy.NewFramerWithOptions(io.Discard, &dir.frame, spdy.WithMaxControlFramePayloadSize(maxSPDYControlFrame))
	}
	return d
}

func (d *spdyDecoder) feed(fromClient bool, at time.Duration, p []byte) error {
	dir := &d.dirs[direction(fromClient)]
	for len(p) > 0 {
		switch {
		case dir.dataLeft > 0:
			n := min(dir.dataLeft, len(p))
			dir.dataLeft -= n
			if channel, ok := d.streams[dir.dataStream]; ok {
				deliver(d.ev, &d.resizes, fromClient, channel, at, p[:n])
			}
			p = p[n:]
		case dir.controlLeft > 0:
			n := min(dir.controlLeft, len(p))
			dir.controlLeft -= n
			if !dir.skip {
				dir.control = append(dir.control, p[:n]...)
			}
			p = p[n:]
			if dir.controlLeft == 0 && !dir.skip {
				if err := d.controlFrame(dir, fromClient); err != nil {
					return err
				}
			}
		default:
			n := copy(dir.header[dir.headerN:], p)
			dir.headerN += n
			p = p[n:]
			if dir.headerN < len(dir.header) {
				return nil
			}
			dir.headerN = 0
			if err := d.frameHeader(dir, fromClient); err != nil {
				return err
			}
		}
	}
	return nil
}

// frameHeader starts the frame whose 8 bytes dir.header holds.
func (d *spdyDecoder) frameHeader(dir *spdyDirection, fromClient bool) error {
	first := binary.BigEndian.Uint32(dir.header[0:4])
	length := int(binary.BigEndian.Uint32(dir.header[4:8]) & 0xffffff)
	if first&0x80000000 == 0 {
		dir.dataStream, dir.dataLeft = first&0x7fffffff, length
		return nil
	}
	switch first & 0xffff {
	case spdySynStream, spdySynReply, spdyHeaders:
		if length > maxSPDYControlFrame {
			return fmt.Errorf("SPDY control frame of %d bytes", length)
		}
		dir.control = append(dir.control[:0], dir.header[:]...)
		dir.controlLeft, dir.skip = length, false
		if length == 0 {
			return d.controlFrame(dir, fromClient)
		}
	default: // no header block: nothing the recording needs
		dir.controlLeft, dir.skip = length, true
	}
	return nil
}

func (d *spdyDecoder) controlFrame(dir *spdyDirection, fromClient bool) error {
	dir.frame.b = dir.control
	frame, err := dir.framer.ReadFrame()
	if err != nil {
		return fmt.Errorf("SPDY control frame: %w", err)
	}
	if syn, ok := frame.(*spdy.SynStreamFrame); ok && fromClient {
		if channel, ok := spdyStreamChannels[syn.Headers.Get("streamType")]; ok {
			d.streams[uint32(syn.StreamId)] = channel
		}
	}
	return nil
}

// frameReader hands the framer one gathered frame.
type frameReader struct{ b []byte }

func (r *frameReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

func direction(fromClient bool) int {
	if fromClient {
		return 1
	}
	return 0
}

// webSocketDecoder reads RFC 6455 frames of the channel.k8s.io protocols: each message's first byte is its channel
// (an ASCII digit with base64, whose data is base64).
type webSocketDecoder struct {
	ev      events
	base64  bool
	dirs    [2]webSocketDirection // the cluster's, the client's
	resizes resizeReader
}

type webSocketDirection struct {
	header  [14]byte
	headerN int
	// The frame being read.
	inFrame     bool
	payloadLeft uint64
	masked      bool
	mask        [4]byte
	maskAt      int
	control     bool
	fin         bool
	// The message being read.
	inMessage    bool
	channelKnown bool
	channel      int
	held         [4]byte // base64 that does not make a whole quantum yet
	heldN        int
	decoded      []byte
}

func newWebSocketDecoder(ev events, base64 bool) *webSocketDecoder {
	return &webSocketDecoder{ev: ev, base64: base64}
}

func (d *webSocketDecoder) feed(fromClient bool, at time.Duration, p []byte) error {
	dir := &d.dirs[direction(fromClient)]
	for len(p) > 0 {
		if !dir.inFrame {
			n, err := dir.readHeader(p)
			if err != nil {
				return err
			}
			p = p[n:]
		} else {
			n := int(min(uint64(len(p)), dir.payloadLeft))
			payload := p[:n]
			p = p[n:]
			dir.payloadLeft -= uint64(n)
			if dir.masked {
				for i := range payload {
					payload[i] ^= dir.mask[dir.maskAt&3]
					dir.maskAt++
				}
			}
			if !dir.control {
				if err := d.payload(dir, fromClient, at, payload); err != nil {
					return err
				}
			}
		}
		if dir.inFrame && dir.payloadLeft == 0 {
			if err := dir.endFrame(); err != nil {
				return err
			}
		}
	}
	return nil
}

// readHeader gathers a frame header; once it is whole, the frame begins.
func (dir *webSocketDirection) readHeader(p []byte) (int, error) {
	used := 0
	for {
		size := 2
		if dir.headerN >= 2 {
			size = webSocketHeaderSize(dir.header[1])
		}
		if dir.headerN == size {
			break
		}
		if used == len(p) {
			return used, nil
		}
		n := copy(dir.header[dir.headerN:size], p[used:])
		dir.headerN += n
		used += n
	}
	h := dir.header[:dir.headerN]
	dir.headerN = 0
	if h[0]&0x70 != 0 {
		return used, errors.New("a websocket frame with reserved bits set: an extension the recorder cannot read")
	}
	length, at := uint64(h[1]&0x7f), 2
	switch length {
	case 126:
		length, at = uint64(binary.BigEndian.Uint16(h[2:4])), 4
	case 127:
		length, at = binary.BigEndian.Uint64(h[2:10]), 10
	}
	dir.masked = h[1]&0x80 != 0
	if dir.masked {
		copy(dir.mask[:], h[at:at+4])
		dir.maskAt = 0
	}
	dir.inFrame, dir.payloadLeft, dir.fin, dir.control = true, length, h[0]&0x80 != 0, false
	switch opcode := h[0] & 0x0f; opcode {
	case 0: // continuation
		if !dir.inMessage {
			return used, errors.New("a websocket continuation frame outside a message")
		}
	case 1, 2: // text, binary
		if dir.inMessage {
			return used, errors.New("a websocket message inside a fragmented one")
		}
		dir.inMessage, dir.channelKnown, dir.heldN = true, false, 0
	case 8, 9, 10: // close, ping, pong: may come between fragments
		dir.control = true
	default:
		return used, fmt.Errorf("websocket opcode %d", opcode)
	}
	return used, nil
}

func webSocketHeaderSize(second byte) int {
	size := 2
	switch second & 0x7f {
	case 126:
		size += 2
	case 127:
		size += 8
	}
	if second&0x80 != 0 {
		size += 4
	}
	return size
}

func (dir *webSocketDirection) endFrame() error {
	dir.inFrame = false
	if dir.control || !dir.fin {
		return nil
	}
	dir.inMessage = false
	if dir.heldN > 0 {
		return errors.New("a base64 websocket message whose length is not a multiple of 4")
	}
	return nil
}

func (d *webSocketDecoder) payload(dir *webSocketDirection, fromClient bool, at time.Duration, p []byte) error {
	if !dir.channelKnown {
		if len(p) == 0 {
			return nil
		}
		dir.channel, dir.channelKnown = int(p[0]), true
		if d.base64 {
			dir.channel -= '0'
		}
		p = p[1:]
	}
	if d.base64 {
		var err error
		if p, err = dir.unbase64(p); err != nil {
			return err
		}
	}
	if len(p) > 0 {
		deliver(d.ev, &d.resizes, fromClient, dir.channel, at, p)
	}
	return nil
}

// unbase64 decodes the whole quanta of what the message has so far.
func (dir *webSocketDirection) unbase64(p []byte) ([]byte, error) {
	out := dir.decoded[:0]
	if dir.heldN > 0 {
		n := copy(dir.held[dir.heldN:], p)
		dir.heldN += n
		p = p[n:]
		if dir.heldN < len(dir.held) {
			return nil, nil
		}
		var quantum [3]byte
		n, err := base64.StdEncoding.Decode(quantum[:], dir.held[:])
		if err != nil {
			return nil, fmt.Errorf("base64 websocket message: %w", err)
		}
		out = append(out, quantum[:n]...)
		dir.heldN = 0
	}
	whole := len(p) &^ 3
	start := len(out)
	out = slices.Grow(out, base64.StdEncoding.DecodedLen(whole))[:start+base64.StdEncoding.DecodedLen(whole)]
	n, err := base64.StdEncoding.Decode(out[start:], p[:whole])
	if err != nil {
		return nil, fmt.Errorf("base64 websocket message: %w", err)
	}
	dir.heldN = copy(dir.held[:], p[whole:])
	dir.decoded = out[:start+n]
	return dir.decoded, nil
}
