package sessionrec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/remotecommand"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/asciicast"
)

// BenchmarkRecordedExec streams 100 MiB of a pod's stdout through the proxy to a client-go exec, in turns: not
// recorded, and recorded with the default options, whose buffer holds the stream back when the recording falls
// behind. A recorded run lasts until its recording is closed, and its recording must hold all of the output. It
// reports the throughput of each, as the client sees it, and the ratio of the recorded to the unrecorded.
func BenchmarkRecordedExec(b *testing.B) {
	const size = 100 << 20
	cluster := startCluster(b)
	dir := b.TempDir()
	plain := startProxy(b, cluster, nil)
	recorded := startProxy(b, cluster, newRecorder(b, Options{Sink: DirSink{Dir: dir}}))
	for _, protocol := range []string{"spdy", "websocket"} {
		b.Run(protocol, func(b *testing.B) {
			// run streams once through p, and checks the recording outside the time.
			run := func(p *proxy) time.Duration {
				stdout := &syncBuffer{countOnly: true}
				start := time.Now()
				err := execute(context.Background(), p.url, protocol, execPath(false, false, "stream", fmt.Sprint(size)),
					remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
				if err != nil || stdout.Len() != size {
					b.Fatalf("exec: %v, %d bytes of %d", err, stdout.Len(), size)
				}
				if p == plain {
					return time.Since(start)
				}
				s := p.session(b)
				waitDone(b, s)
				took := time.Since(start)
				b.StopTimer()
				defer b.StartTimer()
				if err := s.Err(); err != nil {
					b.Fatal(err)
				}
				checkStreamed(b, dir, s.ID(), size)
				runtime.GC() // the check's garbage is not the next run's
				return took
			}
			var plainTime, recordedTime time.Duration
			n := 0
			for b.Loop() {
				// In turns, so that neither gains from going first.
				if n%2 == 0 {
					plainTime += run(plain)
					recordedTime += run(recorded)
				} else {
					recordedTime += run(recorded)
					plainTime += run(plain)
				}
				n++
			}
			mib := float64(n) * size / (1 << 20)
			unrecordedSpeed, recordedSpeed := mib/plainTime.Seconds(), mib/recordedTime.Seconds()
			b.ReportMetric(unrecordedSpeed, "unrecorded-MiB/s")
			b.ReportMetric(recordedSpeed, "recorded-MiB/s")
			b.ReportMetric(recordedSpeed/unrecordedSpeed, "recorded/unrecorded")
		})
	}
}

// checkStreamed checks that the recording of session id holds the output of "stream <size>" whole, ended, and
// removes it.
func checkStreamed(b *testing.B, dir, id string, size int) {
	b.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*", id+".cast"))
	if len(files) != 1 {
		b.Fatalf("recording of session %s: %v", id, files)
	}
	defer func() { _ = os.Remove(files[0]) }()
	f, err := os.Open(files[0])
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	r, err := asciicast.NewReader(f)
	if err != nil {
		b.Fatal(err)
	}
	// The output is one line of text over and over; recorded, each "\n" is "\r\n".
	var line strings.Builder
	streamText(&line, 80)
	want := bytes.Repeat([]byte(strings.ReplaceAll(line.String(), "\n", "\r\n")), (blockSize+1)/80*2+2)
	got, last := 0, asciicast.Event{}
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			b.Fatal(err)
		}
		last = e
		if e.Type != asciicast.Output {
			continue
		}
		at := got % 81
		if !bytes.Equal([]byte(e.Data), want[at:at+len(e.Data)]) {
			b.Fatalf("the recording differs from the output after %d bytes", got)
		}
		got += len(e.Data)
	}
	if wantLen := size / 80 * 81; got != wantLen || last.Type != asciicast.Marker || last.Data != "end" {
		b.Fatalf("the recording holds %d bytes of output of %d, and ends with %v", got, wantLen, last)
	}
}
