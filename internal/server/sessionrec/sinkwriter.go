package sessionrec

import (
	"bufio"
	"io"
	"sync"
)

// writeBufferSize is what the recording gathers before it writes to its sink: larger writes cost less per byte.
const writeBufferSize = 256 << 10

// The buffers are pooled, and a session holds one only while it has something to write: idle sessions hold none.
var writeBuffers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferSize) }}

// sinkWriter gathers the recording's lines into large writes to its sink.
type sinkWriter struct {
	sink io.Writer
	buf  *bufio.Writer
}

func (w *sinkWriter) Write(p []byte) (int, error) {
	if w.buf == nil {
		w.buf = writeBuffers.Get().(*bufio.Writer)
		w.buf.Reset(w.sink)
	}
	return w.buf.Write(p)
}

// Flush writes what was gathered, and gives the buffer back.
func (w *sinkWriter) Flush() error {
	if w.buf == nil {
		return nil
	}
	err := w.buf.Flush()
	w.drop()
	return err
}

// drop gives the buffer back, with what it holds.
func (w *sinkWriter) drop() {
	if w.buf != nil {
		w.buf.Reset(nil)
		writeBuffers.Put(w.buf)
		w.buf = nil
	}
}
