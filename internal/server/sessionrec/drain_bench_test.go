package sessionrec

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/moby/spdystream/spdy"
)

// BenchmarkDrainer is the recorder's side alone: decoding SPDY output frames and writing the recording.
func BenchmarkDrainer(b *testing.B) {
	var client, cluster bytes.Buffer
	cf, _ := spdy.NewFramer(&client, nil)
	_ = cf.WriteFrame(&spdy.SynStreamFrame{StreamId: 1, Headers: http.Header{"streamType": {"stdout"}}})
	sf, _ := spdy.NewFramer(&cluster, nil)
	var text strings.Builder
	streamText(&text, 32<<10)
	_ = sf.WriteFrame(&spdy.DataFrame{StreamId: 1, Data: []byte(text.String())})
	frame := cluster.Bytes()
	s, err := newRecorder(b, Options{Sink: DirSink{Dir: b.TempDir()}}).Start(Meta{Cluster: "c"})
	if err != nil {
		b.Fatal(err)
	}
	s.dec = newSPDYDecoder(s)
	_ = s.dec.feed(true, 0, client.Bytes())
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if err := s.dec.feed(false, 0, frame); err != nil {
			b.Fatal(err)
		}
		if err := s.out.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}
