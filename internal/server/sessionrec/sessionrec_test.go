package sessionrec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/asciicast"
)

const await = 20 * time.Second

// recording reads the recording of session id under dir.
func recording(t testing.TB, dir, id string) (asciicast.Header, []asciicast.Event) {
	t.Helper()
	h, events, err := asciicast.Decode(strings.NewReader(written(t, dir, id)))
	if err != nil {
		t.Fatal(err)
	}
	return h, events
}

// written is what the recording of session id holds so far.
func written(t testing.TB, dir, id string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "cluster1", "*", id+".cast"))
	if err != nil || len(files) != 1 {
		t.Fatalf("recording of session %s: %v, %v", id, files, err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// newRecorder is New, logging to the test.
func newRecorder(t testing.TB, opts Options) *Recorder {
	opts.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	return New(opts)
}

// of joins the data of the events of a type; sizes lists resizes.
func of(events []asciicast.Event, typ asciicast.EventType) string {
	var b strings.Builder
	for _, e := range events {
		if e.Type == typ {
			b.WriteString(e.Data)
		}
	}
	return b.String()
}

func sizes(events []asciicast.Event) []string {
	var s []string
	for _, e := range events {
		if e.Type == asciicast.Resize {
			s = append(s, e.Data)
		}
	}
	return s
}

// session waits for the proxy to start a session.
func (p *proxy) session(t testing.TB) *Session {
	t.Helper()
	select {
	case s := <-p.sessions:
		return s
	case <-time.After(await):
		t.Fatal("no session started")
		return nil
	}
}

func waitDone(t testing.TB, s *Session) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(await):
		t.Fatal("the recording was not closed")
	}
}

func count(result string) float64 { return testutil.ToFloat64(recordings.WithLabelValues(result)) }

// interactive is a kubectl exec -i [-t] in progress.
type interactive struct {
	stdin          *io.PipeWriter
	stdout, stderr *syncBuffer
	resizes        sizeQueue
	ended          chan error
}

func startExec(p *proxy, protocol string, tty bool) *interactive {
	in, stdin := io.Pipe()
	x := &interactive{stdin: stdin, stdout: &syncBuffer{}, stderr: &syncBuffer{}, ended: make(chan error, 1)}
	opts := remotecommand.StreamOptions{Stdin: in, Stdout: x.stdout, Stderr: x.stderr, Tty: tty}
	if tty {
		opts.Stderr = nil
		x.resizes = make(sizeQueue, 4)
		opts.TerminalSizeQueue = x.resizes
	}
	go func() { x.ended <- execute(context.Background(), p.url, protocol, execPath(true, tty, "sh"), opts) }()
	return x
}

func (x *interactive) typeLine(g Gomega, line string) {
	_, err := io.WriteString(x.stdin, line+"\n")
	g.Expect(err).NotTo(HaveOccurred())
}

func (x *interactive) end(t testing.TB) error {
	t.Helper()
	_ = x.stdin.Close()
	if x.resizes != nil {
		close(x.resizes)
	}
	select {
	case err := <-x.ended:
		return err
	case <-time.After(await):
		t.Fatal("the exec did not end")
		return nil
	}
}

func TestRecordsWhatTheTerminalShowedOverSPDYAndWebSocket(t *testing.T) {
	cluster := startCluster(t)
	for _, protocol := range []string{"spdy", "websocket"} {
		for _, tty := range []bool{false, true} {
			for _, recordStdin := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s tty=%t stdin=%t", protocol, tty, recordStdin), func(t *testing.T) {
					g := NewWithT(t)
					dir := t.TempDir()
					p := startProxy(t, cluster, newRecorder(t, Options{Sink: DirSink{Dir: dir}, RecordStdin: recordStdin, FailClosed: true}))
					recorded := count(resultRecorded)
					x := startExec(p, protocol, tty)
					s := p.session(t)
					if tty {
						x.resizes <- remotecommand.TerminalSize{Width: 100, Height: 30}
						g.Eventually(x.stdout.String, await).Should(ContainSubstring("resized 100x30"))
					}
					x.typeLine(g, "echo hello from the pod")
					g.Eventually(x.stdout.String, await).Should(ContainSubstring("hello from the pod"))
					x.typeLine(g, "warn something went wrong")
					if tty {
						g.Eventually(x.stdout.String, await).Should(ContainSubstring("something went wrong"))
						x.resizes <- remotecommand.TerminalSize{Width: 120, Height: 40}
						g.Eventually(x.stdout.String, await).Should(ContainSubstring("resized 120x40"))
					} else {
						g.Eventually(x.stderr.String, await).Should(ContainSubstring("something went wrong"))
					}
					x.typeLine(g, "exit")
					g.Expect(x.end(t)).To(Succeed())
					waitDone(t, s)
					g.Expect(s.Err()).NotTo(HaveOccurred())

					h, events := recording(t, dir, s.ID())
					k := h.Kubernetes
					g.Expect(k).NotTo(BeNil())
					g.Expect(*k).To(Equal(asciicast.Kubernetes{Cluster: "cluster1", User: "alice",
						Groups: []string{"dev", "system:authenticated"}, Namespace: "ns1", Pod: "pod1", Container: "c1",
						Command: []string{"sh"}, Subresource: "exec", Via: "user-server", SessionID: s.ID(), Replica: "proxy-0", TTY: tty}))
					g.Expect(h.Command).To(Equal("sh"))
					output := of(events, asciicast.Output)
					g.Expect(output).To(ContainSubstring("hello from the pod\r\n"))
					g.Expect(output).To(ContainSubstring("something went wrong\r\n"), "stderr is recorded as output")
					if recordStdin {
						g.Expect(of(events, asciicast.Input)).To(Equal("echo hello from the pod\nwarn something went wrong\nexit\n"))
					} else {
						g.Expect(of(events, asciicast.Input)).To(BeEmpty())
					}
					if tty {
						g.Expect(sizes(events)).To(Equal([]string{"100x30", "120x40"}))
						g.Expect(output).To(ContainSubstring("resized 120x40"))
					} else {
						g.Expect(sizes(events)).To(BeEmpty())
					}
					last := events[len(events)-1]
					g.Expect(last.Type).To(Equal(asciicast.Marker))
					g.Expect(last.Data).To(Equal("end"))
					for i := 1; i < len(events); i++ {
						g.Expect(events[i].Time).To(BeNumerically(">=", events[i-1].Time), "events in time order")
					}
					g.Expect(count(resultRecorded) - recorded).To(Equal(1.0))
				})
			}
		}
	}
}

func TestTheStreamPassesUnchanged(t *testing.T) {
	cluster := startCluster(t)
	for _, protocol := range []string{"spdy", "websocket"} {
		t.Run(protocol, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			p := startProxy(t, cluster, newRecorder(t, Options{Sink: DirSink{Dir: dir}, FailClosed: true}))
			stdout := &syncBuffer{}
			const n = 3<<20 + 17
			err := execute(context.Background(), p.url, protocol, execPath(false, false, "stream", fmt.Sprint(n)),
				remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
			g.Expect(err).NotTo(HaveOccurred())
			s := p.session(t)
			waitDone(t, s)
			g.Expect(s.Err()).NotTo(HaveOccurred())
			var want strings.Builder
			streamText(&want, n)
			g.Expect(stdout.String() == want.String()).To(BeTrue(), "the client got what the pod wrote")
			_, events := recording(t, dir, s.ID())
			g.Expect(of(events, asciicast.Output) == strings.ReplaceAll(want.String(), "\n", "\r\n")).To(BeTrue(),
				"the recording holds all of it")
		})
	}
}

func TestStartRefusesTheSessionWhenTheRecordingCannotBeOpened(t *testing.T) {
	cluster := startCluster(t)
	// Root may write anywhere: a file where the directory should be is what stops it.
	blocked := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sink := DirSink{Dir: filepath.Join(blocked, "recordings")}

	t.Run("fail closed", func(t *testing.T) {
		g := NewWithT(t)
		rec := newRecorder(t, Options{Sink: sink, FailClosed: true})
		s, err := rec.Start(Meta{Cluster: "cluster1"})
		g.Expect(err).To(MatchError(ContainSubstring("make the recordings directory")))
		g.Expect(s).To(BeNil())
		g.Expect(testutil.ToFloat64(sinkUp)).To(Equal(0.0))

		refused := count(resultRefused)
		p := startProxy(t, cluster, rec)
		stdout := &syncBuffer{}
		err = execute(context.Background(), p.url, "spdy", execPath(false, false, "stream", "10"),
			remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
		g.Expect(err).To(HaveOccurred(), "the client is refused")
		g.Expect(stdout.Len()).To(BeZero())
		g.Expect(count(resultRefused) - refused).To(Equal(1.0))
	})
	t.Run("fail open", func(t *testing.T) {
		g := NewWithT(t)
		failedOpen := count(resultFailedOpen)
		p := startProxy(t, cluster, newRecorder(t, Options{Sink: sink}))
		stdout := &syncBuffer{}
		err := execute(context.Background(), p.url, "spdy", execPath(false, false, "stream", "10"),
			remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(stdout.Len()).To(Equal(10))
		s := p.session(t)
		g.Expect(s.Err()).To(MatchError(ContainSubstring("make the recordings directory")))
		g.Expect(count(resultFailedOpen) - failedOpen).To(Equal(1.0))
	})
}

// breakableSink writes recordings under a directory until it is broken.
type breakableSink struct {
	DirSink
	broken atomic.Bool
}

func (b *breakableSink) Create(m Meta) (io.WriteCloser, error) {
	f, err := b.DirSink.Create(m)
	if err != nil {
		return nil, err
	}
	return breakableFile{f, &b.broken}, nil
}

type breakableFile struct {
	io.WriteCloser
	broken *atomic.Bool
}

func (f breakableFile) Write(p []byte) (int, error) {
	if f.broken.Load() {
		return 0, errors.New("disk on fire")
	}
	return f.WriteCloser.Write(p)
}

func TestASinkFailureMidSession(t *testing.T) {
	cluster := startCluster(t)
	for _, protocol := range []string{"spdy", "websocket"} {
		t.Run(protocol+" fail closed cuts the session", func(t *testing.T) {
			g := NewWithT(t)
			sink := &breakableSink{DirSink: DirSink{Dir: t.TempDir()}}
			p := startProxy(t, cluster, newRecorder(t, Options{Sink: sink, FailClosed: true}))
			failedClosed := count(resultFailedClosed)
			x := startExec(p, protocol, false)
			s := p.session(t)
			x.typeLine(g, "echo one")
			g.Eventually(x.stdout.String, await).Should(ContainSubstring("one"))
			g.Eventually(func() string { return written(t, sink.Dir, s.ID()) }, await).Should(ContainSubstring("one"))
			sink.broken.Store(true)
			x.typeLine(g, "echo two")
			// The session ends without an exit.
			select {
			case err := <-x.ended:
				t.Logf("The exec ended: %v", err)
			case <-time.After(await):
				t.Fatal("the session went on after its recording failed")
			}
			waitDone(t, s)
			g.Expect(s.Err()).To(MatchError(ContainSubstring("disk on fire")))
			g.Expect(count(resultFailedClosed) - failedClosed).To(Equal(1.0))
			g.Expect(testutil.ToFloat64(sinkUp)).To(Equal(0.0))
			_, events := recording(t, sink.Dir, s.ID())
			g.Expect(of(events, asciicast.Output)).To(ContainSubstring("one"))
			g.Expect(of(events, asciicast.Output)).NotTo(ContainSubstring("two"))
			_ = x.stdin.Close()
		})
		t.Run(protocol+" fail open lets the session finish", func(t *testing.T) {
			g := NewWithT(t)
			sink := &breakableSink{DirSink: DirSink{Dir: t.TempDir()}}
			p := startProxy(t, cluster, newRecorder(t, Options{Sink: sink}))
			failedOpen := count(resultFailedOpen)
			x := startExec(p, protocol, false)
			s := p.session(t)
			x.typeLine(g, "echo one")
			g.Eventually(x.stdout.String, await).Should(ContainSubstring("one"))
			g.Eventually(func() string { return written(t, sink.Dir, s.ID()) }, await).Should(ContainSubstring("one"))
			sink.broken.Store(true)
			x.typeLine(g, "echo two")
			g.Eventually(x.stdout.String, await).Should(ContainSubstring("two"))
			x.typeLine(g, "echo three")
			g.Eventually(x.stdout.String, await).Should(ContainSubstring("three"))
			x.typeLine(g, "exit")
			g.Expect(x.end(t)).To(Succeed(), "the session ends as it would unrecorded")
			waitDone(t, s)
			g.Expect(s.Err()).To(MatchError(ContainSubstring("disk on fire")))
			g.Expect(count(resultFailedOpen) - failedOpen).To(Equal(1.0))
			_, events := recording(t, sink.Dir, s.ID())
			g.Expect(of(events, asciicast.Output)).To(ContainSubstring("one"))
			g.Expect(of(events, asciicast.Output)).NotTo(ContainSubstring("three"))
		})
	}
}

// gatedSink holds every write after the header until its gate is opened: a recording that cannot keep up, or a
// stuck one. held counts the writes it held.
type gatedSink struct {
	DirSink
	gate chan struct{}
	held atomic.Int32
}

func newGatedSink(t testing.TB) *gatedSink {
	return &gatedSink{DirSink: DirSink{Dir: t.TempDir()}, gate: make(chan struct{})}
}

func (s *gatedSink) Create(m Meta) (io.WriteCloser, error) {
	f, err := s.DirSink.Create(m)
	if err != nil {
		return nil, err
	}
	return &gatedFile{WriteCloser: f, sink: s}, nil
}

type gatedFile struct {
	io.WriteCloser
	sink   *gatedSink
	writes int
}

func (f *gatedFile) Write(p []byte) (int, error) {
	if f.writes++; f.writes > 1 {
		select {
		case <-f.sink.gate:
		default:
			f.sink.held.Add(1)
			<-f.sink.gate
		}
	}
	return f.WriteCloser.Write(p)
}

// streamed is the recorded output of "stream <n>" without a TTY.
func streamed(n int) string {
	var want strings.Builder
	streamText(&want, n)
	return strings.ReplaceAll(want.String(), "\n", "\r\n")
}

func TestARecordingThatFallsBehindHoldsTheStreamBack(t *testing.T) {
	cluster := startCluster(t)
	const buffer, output = 64 << 10, 4 << 20
	for _, protocol := range []string{"spdy", "websocket"} {
		for _, failClosed := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s failClosed=%t", protocol, failClosed), func(t *testing.T) {
				g := NewWithT(t)
				// The fake clock never moves: the stream waits as long as the sink holds, however long that is.
				clk := testingclock.NewFakeClock(time.Now())
				sink := newGatedSink(t)
				p := startProxy(t, cluster, newRecorder(t, Options{Sink: sink, FailClosed: failClosed, BufferBytes: buffer, Clock: clk}))
				recorded := count(resultRecorded)
				stdout := &syncBuffer{}
				ended := make(chan error, 1)
				go func() {
					ended <- execute(context.Background(), p.url, protocol, execPath(false, false, "stream", fmt.Sprint(output)),
						remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
				}()
				s := p.session(t)
				g.Eventually(sink.held.Load, await).Should(BeNumerically(">", 0), "the sink holds a write")
				g.Eventually(clk.HasWaiters, await).Should(BeTrue(), "the stream waits for room")
				// While the sink holds, no more passes than the recording has taken: what it gathers for a write,
				// the buffer, and the reads in between.
				g.Expect(stdout.Len()).To(BeNumerically("<", writeBufferSize+buffer+4*blockSize))
				g.Expect(ended).NotTo(Receive())

				close(sink.gate)
				g.Eventually(ended, await).Should(Receive(BeNil()))
				g.Expect(stdout.Len()).To(Equal(output))
				waitDone(t, s)
				g.Expect(s.Err()).NotTo(HaveOccurred())
				g.Expect(count(resultRecorded) - recorded).To(Equal(1.0))
				_, events := recording(t, sink.Dir, s.ID())
				g.Expect(of(events, asciicast.Output) == streamed(output)).To(BeTrue(), "the recording is whole")
				g.Expect(events[len(events)-1].Data).To(Equal("end"))
			})
		}
	}
}

func TestAStuckRecordingIsGivenUpAfterTheStallTimeout(t *testing.T) {
	cluster := startCluster(t)
	const buffer, output = 64 << 10, 4 << 20
	// stalls moves the fake clock by the stall timeout until the recording is given up: the stream waits on it, or
	// is about to.
	stalls := func(g Gomega, clk *testingclock.FakeClock, s *Session) {
		g.Eventually(func() error {
			clk.Step(defaultStallTimeout)
			return s.Err()
		}, await).Should(MatchError(ContainSubstring("the recording stalled: its sink took nothing for 30s")))
	}
	for _, protocol := range []string{"spdy", "websocket"} {
		t.Run(protocol+" fail closed cuts the session", func(t *testing.T) {
			g := NewWithT(t)
			clk := testingclock.NewFakeClock(time.Now())
			sink := newGatedSink(t)
			p := startProxy(t, cluster, newRecorder(t, Options{Sink: sink, FailClosed: true, BufferBytes: buffer, Clock: clk}))
			failedClosed := count(resultFailedClosed)
			stdout := &syncBuffer{countOnly: true}
			ended := make(chan error, 1)
			go func() {
				ended <- execute(context.Background(), p.url, protocol, execPath(false, false, "stream", fmt.Sprint(output)),
					remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
			}()
			s := p.session(t)
			g.Eventually(sink.held.Load, await).Should(BeNumerically(">", 0))
			g.Eventually(clk.HasWaiters, await).Should(BeTrue())
			g.Expect(s.Err()).NotTo(HaveOccurred(), "waiting is not failing")
			stalls(g, clk, s)
			select {
			case err := <-ended:
				t.Logf("The exec ended: %v", err)
			case <-time.After(await):
				t.Fatal("the session went on after its recording stalled")
			}
			g.Expect(stdout.Len()).To(BeNumerically("<", output))
			close(sink.gate)
			waitDone(t, s)
			g.Expect(count(resultFailedClosed) - failedClosed).To(Equal(1.0))
			_, events := recording(t, sink.Dir, s.ID())
			g.Expect(events[len(events)-1].Data).To(HavePrefix("recording failed, session cut: "))
			g.Expect(events[len(events)-1].Data).To(ContainSubstring("stalled"))
		})
		t.Run(protocol+" fail open stops recording and lets the stream go", func(t *testing.T) {
			g := NewWithT(t)
			clk := testingclock.NewFakeClock(time.Now())
			sink := newGatedSink(t)
			p := startProxy(t, cluster, newRecorder(t, Options{Sink: sink, BufferBytes: buffer, Clock: clk}))
			failedOpen := count(resultFailedOpen)
			stdout := &syncBuffer{countOnly: true}
			ended := make(chan error, 1)
			go func() {
				ended <- execute(context.Background(), p.url, protocol, execPath(false, false, "stream", fmt.Sprint(output)),
					remotecommand.StreamOptions{Stdout: stdout, Stderr: io.Discard})
			}()
			s := p.session(t)
			g.Eventually(sink.held.Load, await).Should(BeNumerically(">", 0))
			g.Eventually(clk.HasWaiters, await).Should(BeTrue())
			stalls(g, clk, s)
			// The sink still holds: the rest of the stream no longer waits for it.
			g.Eventually(ended, await).Should(Receive(BeNil()))
			g.Expect(stdout.Len()).To(Equal(output))
			close(sink.gate)
			waitDone(t, s)
			g.Expect(count(resultFailedOpen) - failedOpen).To(Equal(1.0))
			_, events := recording(t, sink.Dir, s.ID())
			g.Expect(events[len(events)-1].Data).To(HavePrefix("recording stopped: "))
			g.Expect(events[len(events)-1].Data).To(ContainSubstring("stalled"))
			g.Expect(len(of(events, asciicast.Output))).To(BeNumerically("<", len(streamed(output))))
		})
	}
}

func TestClosingDoesNotWaitForAStuckRecording(t *testing.T) {
	g := NewWithT(t)
	clk := testingclock.NewFakeClock(time.Now())
	sink := newGatedSink(t)
	s, err := newRecorder(t, Options{Sink: sink, Clock: clk}).Start(Meta{Cluster: "cluster1", TTY: true})
	g.Expect(err).NotTo(HaveOccurred())
	conn := s.Wrap(&fakeConn{toRead: []byte{0x82, 4, channelStdout, 'a', 'b', 'c'}}, WebSocket)
	_, err = io.Copy(io.Discard, conn)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(sink.held.Load).Should(BeNumerically(">", 0), "the sink holds the recording's first write")
	closed := make(chan error, 1)
	go func() { closed <- conn.Close() }()
	g.Eventually(func() error {
		clk.Step(defaultStallTimeout)
		return s.Err()
	}, await).Should(MatchError(ContainSubstring("the recording stalled")))
	g.Eventually(closed, await).Should(Receive(BeNil()))
	g.Expect(s.Done()).NotTo(BeClosed())
	close(sink.gate)
	waitDone(t, s)
	_, events := recording(t, sink.Dir, s.ID())
	g.Expect(of(events, asciicast.Output)).To(Equal("abc"), "what was queued is recorded once the sink comes back")
	g.Expect(events[len(events)-1].Data).To(HavePrefix("recording stopped: "))
}

func TestDiscardRemovesTheRecordingOfASessionThatDidNotBegin(t *testing.T) {
	results := []string{resultRecorded, resultRefused, resultFailedOpen, resultFailedClosed}
	counts := func() []float64 {
		var c []float64
		for _, r := range results {
			c = append(c, count(r))
		}
		return c
	}
	casts := func(dir string) []string {
		files, err := filepath.Glob(filepath.Join(dir, "cluster1", "*", "*.cast"))
		if err != nil {
			t.Fatal(err)
		}
		return files
	}

	t.Run("a recording", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		before := counts()
		s, err := newRecorder(t, Options{Sink: DirSink{Dir: dir}, FailClosed: true}).Start(Meta{Cluster: "cluster1"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(casts(dir)).To(HaveLen(1))
		s.Discard()
		g.Expect(casts(dir)).To(BeEmpty())
		g.Expect(s.Done()).To(BeClosed())
		g.Expect(s.Err()).NotTo(HaveOccurred())
		s.Discard()
		g.Expect(counts()).To(Equal(before), "nothing is counted")
	})
	t.Run("a session that records nothing", func(t *testing.T) {
		g := NewWithT(t)
		blocked := filepath.Join(t.TempDir(), "file")
		g.Expect(os.WriteFile(blocked, nil, 0o600)).To(Succeed())
		before := counts()
		s, err := newRecorder(t, Options{Sink: DirSink{Dir: filepath.Join(blocked, "recordings")}}).Start(Meta{Cluster: "cluster1"})
		g.Expect(err).NotTo(HaveOccurred())
		s.Discard()
		s.Discard()
		g.Expect(counts()).To(Equal(before), "a session that did not begin did not go on unrecorded")
	})
	t.Run("after Wrap it does nothing", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		recorded := count(resultRecorded)
		s, err := newRecorder(t, Options{Sink: DirSink{Dir: dir}}).Start(Meta{Cluster: "cluster1", TTY: true})
		g.Expect(err).NotTo(HaveOccurred())
		conn := s.Wrap(&fakeConn{toRead: []byte{0x82, 4, channelStdout, 'a', 'b', 'c'}}, WebSocket)
		s.Discard()
		_, err = io.Copy(io.Discard, conn)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(conn.Close()).To(Succeed())
		g.Expect(count(resultRecorded) - recorded).To(Equal(1.0))
		_, events := recording(t, dir, s.ID())
		g.Expect(of(events, asciicast.Output)).To(Equal("abc"))
	})
}

func TestDirSinkLayout(t *testing.T) {
	g := NewWithT(t)
	dir := filepath.Join(t.TempDir(), "recordings")
	started := time.Date(2026, 3, 4, 23, 30, 0, 0, time.FixedZone("UTC-2", -2*3600))
	w, err := DirSink{Dir: dir}.Create(Meta{Cluster: "cluster1", SessionID: "S1", Started: started})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(w.Close()).To(Succeed())
	file := filepath.Join(dir, "cluster1", "2026-03-05", "S1.cast")
	info, err := os.Stat(file)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	for _, d := range []string{dir, filepath.Join(dir, "cluster1"), filepath.Join(dir, "cluster1", "2026-03-05")} {
		info, err := os.Stat(d)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o700)), d)
	}
	_, err = DirSink{Dir: dir}.Create(Meta{Cluster: "cluster1", SessionID: "S1", Started: started})
	g.Expect(err).To(HaveOccurred(), "a recording never replaces another")

	g.Expect(DirSink{Dir: dir}.Remove(Meta{Cluster: "cluster1", SessionID: "S1", Started: started})).To(Succeed())
	_, err = os.Stat(file)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "Remove deletes the recording")
	_, err = os.Stat(filepath.Dir(file))
	g.Expect(err).NotTo(HaveOccurred(), "its directory stays")
	g.Expect(DirSink{Dir: dir}.Remove(Meta{Cluster: "cluster1", SessionID: "S1", Started: started})).NotTo(Succeed())
}

func TestDirSinkRefusesNamesThatLeaveItsDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, m := range []Meta{
		{Cluster: "a/b", SessionID: "S"},
		{Cluster: "..", SessionID: "S"},
		{Cluster: ".", SessionID: "S"},
		{Cluster: "", SessionID: "S"},
		{Cluster: `a\b`, SessionID: "S"},
		{Cluster: "c", SessionID: "../S"},
		{Cluster: "c", SessionID: ".."},
	} {
		_, err := DirSink{Dir: dir}.Create(m)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("cannot name a recording file")), "%+v", m)
		NewWithT(t).Expect(DirSink{Dir: dir}.Remove(m)).To(MatchError(ContainSubstring("cannot name a recording file")), "%+v", m)
	}
	entries, _ := os.ReadDir(dir)
	NewWithT(t).Expect(entries).To(BeEmpty())

	t.Run("a symbolic link out", func(t *testing.T) {
		g := NewWithT(t)
		outside := t.TempDir()
		g.Expect(os.Symlink(outside, filepath.Join(dir, "cluster1"))).To(Succeed())
		m := Meta{Cluster: "cluster1", SessionID: "S", Started: time.Now()}
		_, err := DirSink{Dir: dir}.Create(m)
		g.Expect(err).To(HaveOccurred())
		entries, _ := os.ReadDir(outside)
		g.Expect(entries).To(BeEmpty())

		rel, err := RecordingPath(m)
		g.Expect(err).NotTo(HaveOccurred())
		there := filepath.Join(outside, strings.TrimPrefix(filepath.FromSlash(rel), "cluster1"+string(filepath.Separator)))
		g.Expect(os.MkdirAll(filepath.Dir(there), 0o700)).To(Succeed())
		g.Expect(os.WriteFile(there, nil, 0o600)).To(Succeed())
		g.Expect(DirSink{Dir: dir}.Remove(m)).NotTo(Succeed())
		g.Expect(there).To(BeAnExistingFile(), "nothing is removed through a link out")
	})
}

func TestTarget(t *testing.T) {
	for _, tc := range []struct {
		name, path, query string
		want              Meta
		ok                bool
	}{
		{"exec", "/api/v1/namespaces/ns/pods/p/exec", "container=c&command=sh&command=-c&command=echo+hi&tty=true&stdin=true",
			Meta{Namespace: "ns", Pod: "p", Container: "c", Command: []string{"sh", "-c", "echo hi"}, Subresource: "exec", TTY: true}, true},
		{"attach", "/api/v1/namespaces/ns/pods/p/attach", "container=c&stdin=true&tty=1",
			Meta{Namespace: "ns", Pod: "p", Container: "c", Subresource: "attach", TTY: true}, true},
		{"an attach has no command", "/api/v1/namespaces/ns/pods/p/attach", "command=ignored",
			Meta{Namespace: "ns", Pod: "p", Subresource: "attach"}, true},
		{"tty false", "/api/v1/namespaces/ns/pods/p/exec", "tty=false&command=ls",
			Meta{Namespace: "ns", Pod: "p", Command: []string{"ls"}, Subresource: "exec"}, true},
		{"tty empty is true, as the kube-apiserver reads it", "/api/v1/namespaces/ns/pods/p/exec", "tty=",
			Meta{Namespace: "ns", Pod: "p", Subresource: "exec", TTY: true}, true},
		{"escaped names", "/api/v1/namespaces/n%73/pods/p%2Dx/exec", "",
			Meta{Namespace: "ns", Pod: "p-x", Subresource: "exec"}, true},
		{"port-forward", "/api/v1/namespaces/ns/pods/p/portforward", "ports=80", Meta{}, false},
		{"logs", "/api/v1/namespaces/ns/pods/p/log", "follow=true", Meta{}, false},
		{"a pod", "/api/v1/namespaces/ns/pods/p", "", Meta{}, false},
		{"a trailing slash", "/api/v1/namespaces/ns/pods/p/exec/", "", Meta{}, false},
		{"a service proxy", "/api/v1/namespaces/ns/services/s/proxy/exec", "", Meta{}, false},
		{"another group", "/apis/v1/namespaces/ns/pods/p/exec", "", Meta{}, false},
		{"no namespace", "/api/v1/namespaces//pods/p/exec", "", Meta{}, false},
		{"a bad escape", "/api/v1/namespaces/%zz/pods/p/exec", "", Meta{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			q, err := url.ParseQuery(tc.query)
			g.Expect(err).NotTo(HaveOccurred())
			m, ok := Target(tc.path, q)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(m).To(Equal(tc.want))
		})
	}
}

func TestClosingTheSessionWaitsForTheRecording(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	s, err := newRecorder(t, Options{Sink: DirSink{Dir: dir}, FailClosed: true}).Start(Meta{Cluster: "cluster1", TTY: true})
	g.Expect(err).NotTo(HaveOccurred())
	backend := &fakeConn{}
	conn := s.Wrap(backend, WebSocket)
	_, isCloseWriter := conn.(interface{ CloseWrite() error })
	g.Expect(isCloseWriter).To(BeFalse(), "no half-close where the backend has none")
	backend.toRead = []byte{0x82, 4, channelStdout, 'a', 'b', 'c'}
	_, err = conn.Read(make([]byte, 64))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn.Close()).To(Succeed())
	g.Expect(backend.closed).To(BeTrue())
	select {
	case <-s.Done():
	default:
		t.Fatal("Close returned before the recording was closed")
	}
	_, events := recording(t, dir, s.ID())
	g.Expect(of(events, asciicast.Output)).To(Equal("abc"))

	s, err = newRecorder(t, Options{Sink: DirSink{Dir: dir}}).Start(Meta{Cluster: "cluster1"})
	g.Expect(err).NotTo(HaveOccurred())
	halfClosing := &fakeHalfCloser{}
	conn = s.Wrap(halfClosing, SPDY)
	cw, isCloseWriter := conn.(interface{ CloseWrite() error })
	g.Expect(isCloseWriter).To(BeTrue(), "the half-close of the backend is kept")
	g.Expect(cw.CloseWrite()).To(Succeed())
	g.Expect(halfClosing.halfClosed).To(BeTrue())
	g.Expect(conn.Close()).To(Succeed())
}

type fakeConn struct {
	mu     sync.Mutex
	toRead []byte
	closed bool
}

func (c *fakeConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.toRead) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.toRead)
	c.toRead = c.toRead[n:]
	return n, nil
}

func (c *fakeConn) Write(p []byte) (int, error) { return len(p), nil }

func (c *fakeConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

type fakeHalfCloser struct {
	fakeConn
	halfClosed bool
}

func (c *fakeHalfCloser) CloseWrite() error { c.halfClosed = true; return nil }
