package asciicast

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"
)

// Writer writes a recording: WriteHeader first, then events, then Finish. Each call writes whole lines in one Write,
// so give it a buffered writer when events are small and many. It is not safe for concurrent use.
//
// Output and input are bytes, not text: a rune that one call splits is held back and completed by the next call of
// the same kind, and bytes that are not UTF-8 become U+FFFD, one for each maximal invalid subsequence as asciinema
// (and Python's and Rust's lossy decoders) replace them, so every line is valid JSON.
type Writer struct {
	// OutputCRLF writes each "\n" of the output as "\r\n", as a terminal in its usual mode (ONLCR) shows what a
	// process writes: for output that no TTY translated, so that players draw its lines as they were seen.
	OutputCRLF bool

	w           io.Writer
	line        []byte
	held        [2]heldRune // output, input
	last        [2]time.Duration
	wroteHeader bool
	err         error
}

// NewWriter writes a recording to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// WriteHeader writes the first line; Version is set to 2.
func (w *Writer) WriteHeader(h Header) error {
	if w.wroteHeader {
		return errors.New("asciicast: header already written")
	}
	h.Version = Version
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	w.wroteHeader = true
	return w.write(append(b, '\n'))
}

// Output records what the terminal showed at t.
func (w *Writer) Output(t time.Duration, data []byte) error { return w.data(t, 0, data) }

// Input records what was typed at t.
func (w *Writer) Input(t time.Duration, data []byte) error { return w.data(t, 1, data) }

// Resize records a new terminal size at t.
func (w *Writer) Resize(t time.Duration, width, height int) error {
	size := strconv.AppendInt(nil, int64(width), 10)
	size = append(size, 'x')
	size = strconv.AppendInt(size, int64(height), 10)
	return w.event(t, Resize, nil, size)
}

// Marker records a labelled point at t.
func (w *Writer) Marker(t time.Duration, label string) error {
	return w.event(t, Marker, nil, []byte(label))
}

// Finish writes what is held back of a split rune, as U+FFFD at the time of its last event. It does not close the
// underlying writer.
func (w *Writer) Finish() error {
	for i, typ := range []EventType{Output, Input} {
		if w.held[i].n > 0 {
			w.held[i].n = 0
			if err := w.event(w.last[i], typ, nil, []byte("\ufffd")); err != nil {
				return err
			}
		}
	}
	return w.err
}

func (w *Writer) data(t time.Duration, kind int, data []byte) error {
	typ := Output
	if kind == 1 {
		typ = Input
	}
	w.last[kind] = t
	return w.event(t, typ, &w.held[kind], data)
}

// event writes one line; nothing when data is empty, or all of it is held back.
func (w *Writer) event(t time.Duration, typ EventType, held *heldRune, data []byte) error {
	if w.err != nil {
		return w.err
	}
	if !w.wroteHeader {
		return errors.New("asciicast: an event before the header")
	}
	line := append(w.line[:0], '[')
	line = appendSeconds(line, t)
	line = append(line, ',', '"')
	line = append(line, typ...)
	line = append(line, '"', ',', '"')
	empty := len(line)
	line = appendString(line, held, data, w.OutputCRLF && typ == Output)
	w.line = line
	if len(line) == empty && typ != Marker {
		return nil
	}
	w.line = append(line, '"', ']', '\n')
	return w.write(w.line)
}

func (w *Writer) write(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		w.err = err
	}
	return w.err
}

// heldRune is the start of a rune that the previous data ended with.
type heldRune struct {
	b [utf8.UTFMax]byte
	n int
}

// plain marks the ASCII bytes a JSON string holds as they are.
var plain = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// appendString appends data as the inside of a JSON string. With held, a rune that data ends in the middle of is
// kept there for the next call, and one kept from the last call is completed first; without it, it is replaced.
// crlf writes "\n" as "\r\n".
func appendString(dst []byte, held *heldRune, data []byte, crlf bool) []byte {
	if held != nil && held.n > 0 {
		var joined [utf8.UTFMax]byte
		n := copy(joined[:], held.b[:held.n])
		n += copy(joined[n:], data)
		size, st := scanRune(joined[:n])
		switch st {
		case runeIncomplete: // data is shorter than what the rune still needs
			held.n = copy(held.b[:], joined[:n])
			return dst
		case runeValid:
			dst = append(dst, joined[:size]...)
		case runeInvalid: // the kept bytes are a valid prefix: data's first byte broke it, and is read again below
			dst = append(dst, "\ufffd"...)
		}
		data = data[max(size-held.n, 0):]
		held.n = 0
	}
	start := 0
	for i := 0; i < len(data); {
		// Eight bytes at a time while they are all printable ASCII, which JSON holds as it is: most output.
		for i+8 <= len(data) {
			if special := specialBytes(binary.LittleEndian.Uint64(data[i:])); special != 0 {
				i += bits.TrailingZeros64(special) >> 3
				break
			}
			i += 8
		}
		if i == len(data) {
			break
		}
		b := data[i]
		if b < utf8.RuneSelf {
			if plain[b] {
				i++
				continue
			}
			dst = append(dst, data[start:i]...)
			if b == '\n' && crlf {
				dst = append(dst, `\r\n`...)
			} else {
				dst = appendEscaped(dst, b)
			}
			i++
			start = i
			continue
		}
		size, st := scanRune(data[i:])
		if st == runeValid {
			i += size
			continue
		}
		dst = append(dst, data[start:i]...)
		if st == runeIncomplete && held != nil {
			held.n = copy(held.b[:], data[i:])
			return dst
		}
		dst = append(dst, "\ufffd"...)
		i += size
		start = i
	}
	return append(dst, data[start:]...)
}

// specialBytes marks with its high bit each byte of w that JSON does not hold as it is, or that starts or continues
// a multi-byte rune: below 0x20, above 0x7f, '"' and '\\'. The lowest mark is exact (the "haszero" and "hasless" of
// Bit Twiddling Hacks), which is where the next look is needed.
func specialBytes(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := w^(ones*'"'), w^(ones*'\\')
	return (w | (w-ones*0x20)&^w | (quote-ones)&^quote | (backslash-ones)&^backslash) & highs
}

func appendEscaped(dst []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(dst, '\\', b)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	}
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
}

type runeStatus int

const (
	runeValid runeStatus = iota
	runeInvalid
	runeIncomplete
)

// scanRune reads the UTF-8 sequence p begins with (Unicode's table 3-7): a valid rune and its size, an invalid
// sequence and the size of its maximal subpart (what one U+FFFD replaces), or a valid prefix that p ends in.
func scanRune(p []byte) (int, runeStatus) {
	b0 := p[0]
	lo, hi := byte(0x80), byte(0xbf)
	var n int
	switch {
	case b0 < utf8.RuneSelf:
		return 1, runeValid
	case b0 < 0xc2:
		return 1, runeInvalid
	case b0 < 0xe0:
		n = 2
	case b0 < 0xf0:
		n = 3
		switch b0 {
		case 0xe0:
			lo = 0xa0
		case 0xed:
			hi = 0x9f // no surrogates
		}
	case b0 < 0xf5:
		n = 4
		switch b0 {
		case 0xf0:
			lo = 0x90
		case 0xf4:
			hi = 0x8f // nothing above U+10FFFF
		}
	default:
		return 1, runeInvalid
	}
	for i := 1; i < n; i++ {
		if i == len(p) {
			return i, runeIncomplete
		}
		if p[i] < lo || p[i] > hi {
			return i, runeInvalid
		}
		lo, hi = 0x80, 0xbf
	}
	return n, runeValid
}
