// Package sessionrec records the exec and attach sessions the user-server carries, as asciicast v2 (pkg/asciicast):
// what the terminal showed (stdout and stderr), what was typed (stdin, when asked) and the terminal's resizes.
//
// A Session taps the upgraded connection to the cluster that httputil.ReverseProxy copies: the bytes pass unchanged,
// and copies of them go to a bounded buffer (Options.BufferBytes) that one goroutine drains, decoding the stream
// protocol (SPDY or websocket, see Protocol) and writing the recording. A recording that falls behind holds the
// stream back: when the buffer is full, the copy waits until the drainer makes room, so that a bulk copy through exec
// runs at the recorder's pace and is recorded whole. A recording is given up only when its sink fails, or makes no
// room for Options.StallTimeout (the sink is stuck: a hung network volume, say). Then FailClosed cuts the session and
// Session.Err says why; otherwise the recording stops there, marked so, and the session goes on unrecorded and no
// longer held back. Each session counts once in cluster_proxy_session_recordings_total.
//
// A recording is opened before the session's request goes to the cluster, so that a session that cannot be recorded
// is refused before anything runs; the cluster's answer decides what becomes of it. A 101 lets it tap the stream, in
// the ReverseProxy's ModifyResponse; any other answer, or none, discards it:
//
//	s, err := recorder.Start(m) // m from Target, with who asks, by which way, through which replica
//	if err != nil {
//		return err // failing closed: the session is refused
//	}
//	// ... the request goes to the cluster, through a ReverseProxy whose
//	ModifyResponse: func(res *http.Response) error {
//		if res.StatusCode != http.StatusSwitchingProtocols {
//			return nil // the proxy calls s.Discard() when it is done with the request
//		}
//		p, known := sessionrec.ProtocolOf(res)
//		if !known && recorder.FailsClosed() {
//			return errUnrecordable // the client is answered 502
//		}
//		res.Body = s.Wrap(res.Body.(io.ReadWriteCloser), p) // an unknown p stops the recording, marked so
//		return nil
//	}
//
// The recording: a header naming the session under "kubernetes", "o" events of stdout and stderr, "i" events of
// stdin with Options.RecordStdin, "r" events of resizes, and a last "m" event: "end" when the stream ended,
// "recording stopped: <why>" when the recording failed open, "recording failed, session cut: <why>" when it failed
// closed. A recording without that marker was cut short: its sink failed, or the proxy-server died. Output of a
// session without a TTY is recorded as kubectl's terminal showed it, each "\n" as "\r\n", so that players draw its
// lines as they were seen; the stream itself is not changed.
//
// The recorder costs about 0.7 ns of CPU per byte of output, more than half of it the JSON of the events and most of
// the rest the writes to the sink. A bulk copy through exec is slowed to what the recorder can write: on two cores,
// about three quarters of the unrecorded stream's speed (BenchmarkRecordedExec).
package sessionrec

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/asciicast"
)

// Meta names a recorded session; it becomes the recording's header.
type Meta struct {
	// SessionID names the recording; Start makes one up when it is empty.
	SessionID string
	Cluster   string
	// User and Groups are who the session runs as on the cluster.
	User      string
	Groups    []string
	Namespace string
	Pod       string
	Container string
	// Command is an exec's argv; empty for attach.
	Command []string
	// Subresource is exec or attach.
	Subresource string
	// Via is the way into the cluster: user-server or aggregated.
	Via string
	// Replica is the proxy-server replica carrying the session.
	Replica string
	TTY     bool
	// Started is when the session began; Start sets it to now when it is zero.
	Started time.Time
}

// Target reads what is recorded of a session from the kube-apiserver request it goes as: the escaped path
// /api/v1/namespaces/<ns>/pods/<pod>/exec or .../attach, and its query (container, command, tty). ok is false for
// any other request; port-forward is not recorded, it has no terminal. tty is read as the kube-apiserver reads it:
// present and neither "false" nor "0".
func Target(escapedPath string, query url.Values) (m Meta, ok bool) {
	parts := strings.Split(escapedPath, "/")
	if len(parts) != 8 || parts[0] != "" || parts[1] != "api" || parts[2] != "v1" || parts[3] != "namespaces" ||
		parts[5] != "pods" || (parts[7] != "exec" && parts[7] != "attach") {
		return Meta{}, false
	}
	namespace, errNS := url.PathUnescape(parts[4])
	pod, errPod := url.PathUnescape(parts[6])
	if errNS != nil || errPod != nil || namespace == "" || pod == "" {
		return Meta{}, false
	}
	m = Meta{Namespace: namespace, Pod: pod, Container: query.Get("container"), Subresource: parts[7]}
	if tty := query["tty"]; len(tty) > 0 {
		m.TTY = tty[0] != "0" && !strings.EqualFold(tty[0], "false")
	}
	if m.Subresource == "exec" {
		m.Command = append([]string(nil), query["command"]...)
	}
	return m, true
}

// Options configure a Recorder; zero values take the defaults.
type Options struct {
	// Sink stores the recordings; required.
	Sink Sink
	// RecordStdin records what is typed as well: passwords too, so it is off by default.
	RecordStdin bool
	// FailClosed refuses a session whose recording cannot be opened, and cuts one whose recording fails; otherwise
	// such sessions go on unrecorded.
	FailClosed bool
	// BufferBytes bounds the copies of a session's stream not yet recorded (give or take a read), default 4 MiB:
	// the recording lets a burst through at the stream's speed and catches up after it. A longer burst waits for
	// the recording.
	BufferBytes int
	// StallTimeout is how long the stream waits for a recording that makes no room in its buffer before the
	// recording is given up, default 30s.
	StallTimeout time.Duration
	// Clock times the events and the stalls; default the real clock.
	Clock clock.Clock
	// Logger reports recordings that failed; the zero Logger (and logr.Discard(), which is the same) is klog's.
	Logger klog.Logger
}

const (
	defaultBufferBytes  = 4 << 20
	defaultStallTimeout = 30 * time.Second
)

// Recorder starts the recordings of sessions.
type Recorder struct {
	opts   Options
	health sinkHealth
}

// New fills in the defaults. It panics without a Sink: that is a programming error, not bad input.
func New(opts Options) *Recorder {
	if opts.Sink == nil {
		panic("sessionrec: Options.Sink is required")
	}
	if opts.BufferBytes <= 0 {
		opts.BufferBytes = defaultBufferBytes
	}
	if opts.StallTimeout <= 0 {
		opts.StallTimeout = defaultStallTimeout
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = klog.Background()
	}
	// Up until a recording fails: a replica that records nothing yet has nothing wrong with its sink.
	sinkUp.Set(1)
	return &Recorder{opts: opts}
}

// Start opens the recording of a session and writes its header, before the session's request goes to the cluster.
// It returns an error only when the session must be refused: the recording could not be opened and FailClosed is
// set. Failing open, such a session gets a Session that records nothing. Wrap the Session when the cluster answers
// 101, and Discard it otherwise.
func (r *Recorder) Start(m Meta) (*Session, error) {
	if m.SessionID == "" {
		m.SessionID = rand.Text()
	}
	if m.Started.IsZero() {
		m.Started = r.opts.Clock.Now()
	}
	s := &Session{rec: r, meta: m, done: make(chan struct{})}
	s.q = newQueue(r.opts.BufferBytes, func() time.Duration { return r.opts.Clock.Since(m.Started) })
	err := s.open()
	if err == nil {
		r.health.works()
		return s, nil
	}
	r.health.failed(err)
	err = fmt.Errorf("open the recording of session %s: %w", m.SessionID, err)
	if r.opts.FailClosed {
		recordings.WithLabelValues(resultRefused).Inc()
		r.opts.Logger.Error(err, "Refusing a session that cannot be recorded", "cluster", m.Cluster, "user", m.User)
		return nil, err
	}
	// Counted once the session goes on (Wrap): the cluster may still refuse it.
	r.opts.Logger.Error(err, "Session goes on unrecorded", "cluster", m.Cluster, "user", m.User)
	s.off = true
	s.err = err
	close(s.done)
	return s, nil
}

func (s *Session) open() error {
	f, err := s.rec.opts.Sink.Create(s.meta)
	if err != nil {
		return err
	}
	s.file = f
	s.out = &sinkWriter{sink: countingWriter{f, &s.rec.health}}
	s.cast = asciicast.NewWriter(s.out)
	s.cast.OutputCRLF = !s.meta.TTY
	m := s.meta
	title := m.Cluster + ": " + m.Namespace + "/" + m.Pod
	if m.Container != "" {
		title += "/" + m.Container
	}
	err = s.cast.WriteHeader(asciicast.Header{Width: 80, Height: 24, Timestamp: m.Started.Unix(),
		Command: strings.Join(m.Command, " "), Title: title,
		Kubernetes: &asciicast.Kubernetes{Cluster: m.Cluster, User: m.User, Groups: m.Groups, Namespace: m.Namespace,
			Pod: m.Pod, Container: m.Container, Command: m.Command, Subresource: m.Subresource, Via: m.Via,
			SessionID: m.SessionID, Replica: m.Replica, TTY: m.TTY}})
	if err == nil {
		err = s.out.Flush()
	}
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("write the header: %w", err)
	}
	return nil
}

// Session is the recording of one session.
type Session struct {
	rec     *Recorder
	meta    Meta
	off     bool // failed open at Start: records nothing
	file    io.WriteCloser
	out     *sinkWriter
	cast    *asciicast.Writer
	q       *queue
	backend io.ReadWriteCloser
	dec     decoder
	// undecodable says the decoder lost track of the stream (the drainer's own).
	undecodable bool
	done        chan struct{}
	// stopped says the tap hands no more copies: the recording failed.
	stopped atomic.Bool
	// stalled says the recording failed because it made no room for the stall timeout.
	stalled atomic.Bool

	mu         sync.Mutex
	err        error
	sinkBroken bool // the failure was the sink's: nothing more can be written
	wrapped    bool
	discarded  bool
}

// ID is the session's ID, the name of its recording.
func (s *Session) ID() string { return s.meta.SessionID }

// Done is closed once the recording is closed: after the wrapped connection was closed, or earlier when the
// recording failed, or by Discard.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err says why the recording failed, nil while it has not. With FailClosed it is also why the session was cut.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Wrap taps backend, the upgraded connection to the cluster (what ReverseProxy has as the Body of a 101 answer):
// Read is what the cluster sends the client, Write what the client sends the cluster. p is the stream's protocol
// (ProtocolOf). Closing the returned connection closes backend, then waits for the recording to be written and
// closed, unless it stalls (Options.StallTimeout). Call Wrap once, and not after Discard.
func (s *Session) Wrap(backend io.ReadWriteCloser, p Protocol) io.ReadWriteCloser {
	s.mu.Lock()
	misused := s.wrapped || s.discarded
	s.wrapped = true
	s.mu.Unlock()
	if misused {
		return backend
	}
	if s.off {
		recordings.WithLabelValues(resultFailedOpen).Inc()
		return backend
	}
	s.backend = backend
	switch p {
	case SPDY:
		s.dec = newSPDYDecoder(s)
	case WebSocket, WebSocketBase64:
		s.dec = newWebSocketDecoder(s, p == WebSocketBase64)
	default:
		s.undecodable = true
		s.fail(fmt.Errorf("stream protocol %v cannot be recorded", p), false)
	}
	go s.drain()
	t := &tap{s: s, backend: backend}
	if _, ok := backend.(closeWriter); ok {
		return tapCloseWriter{t}
	}
	return t
}

// Discard closes and removes the recording of a session that did not begin: the cluster did not answer its request
// with a 101, or did not answer. Nothing happened, so nothing is counted. Discard does nothing once Wrap was called,
// and may be called more than once, and on a Session that records nothing.
func (s *Session) Discard() {
	s.mu.Lock()
	ignored := s.wrapped || s.discarded
	s.discarded = true
	s.mu.Unlock()
	if ignored || s.off {
		return
	}
	defer close(s.done)
	log := s.rec.opts.Logger.WithValues("cluster", s.meta.Cluster, "user", s.meta.User, "session", s.meta.SessionID)
	if err := s.file.Close(); err != nil {
		log.Error(err, "Cannot close the recording of a session that did not begin")
	}
	if err := s.rec.opts.Sink.Remove(s.meta); err != nil {
		log.Error(err, "Cannot remove the recording of a session that did not begin")
	}
}

// room waits until the buffer has room for n bytes more. It returns an error when the session must not go on: the
// recording stalled, failing closed.
func (s *Session) room(n int) error {
	if s.stopped.Load() || s.q.wait(n, s.rec.opts.Clock, s.rec.opts.StallTimeout) == nil {
		return nil
	}
	s.stall()
	if s.rec.opts.FailClosed {
		return s.Err()
	}
	return nil
}

// stall gives up a recording that made no room for the stall timeout: its sink takes nothing.
func (s *Session) stall() {
	s.stalled.Store(true)
	err := fmt.Errorf("the recording stalled: its sink took nothing for %v", s.rec.opts.StallTimeout)
	s.rec.health.failed(err)
	s.fail(err, false)
}

// fail stops the recording, and cuts the session with FailClosed; the first failure is the one that counts.
func (s *Session) fail(err error, sinkBroken bool) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = fmt.Errorf("record session %s: %w", s.meta.SessionID, err)
	s.sinkBroken = sinkBroken
	s.mu.Unlock()
	s.stopped.Store(true)
	if sinkBroken {
		s.rec.health.failed(err)
	}
	s.q.close()
	log := s.rec.opts.Logger.WithValues("cluster", s.meta.Cluster, "user", s.meta.User, "session", s.meta.SessionID)
	if s.rec.opts.FailClosed {
		log.Error(err, "Cutting a session whose recording failed")
		_ = s.backend.Close()
		return
	}
	log.Error(err, "Session recording stopped, the session goes on unrecorded")
}

func (s *Session) failure() (error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err, s.sinkBroken
}

// drain decodes the copies and writes the recording, until the stream ends or the recording fails.
func (s *Session) drain() {
	defer close(s.done)
	for {
		b := s.q.tryTake()
		if b == nil {
			// Nothing waits: what was gathered goes to the sink now. A burst is written in large pieces.
			s.flush()
			b = s.q.take()
		}
		for _, p := range b.pieces {
			for left := p.n; left > 0; {
				chunk := b.next(left)
				left -= len(chunk)
				// What was queued before a failure passed through: it is recorded unless it cannot be.
				if _, broken := s.failure(); broken || s.undecodable {
					continue
				}
				if err := s.dec.feed(p.fromClient, p.at, chunk); err != nil {
					direction := "cluster's"
					if p.fromClient {
						direction = "client's"
					}
					s.undecodable = true
					s.fail(fmt.Errorf("decode the %s %s stream: %w", direction, s.protocolName(), err), false)
				}
			}
		}
		closed := b.closed
		s.q.release(b)
		if closed {
			s.finish()
			return
		}
	}
}

func (s *Session) flush() {
	if _, broken := s.failure(); !broken {
		if err := s.out.Flush(); err != nil {
			s.fail(err, true)
		}
	}
}

func (s *Session) protocolName() string {
	switch s.dec.(type) {
	case *spdyDecoder:
		return "SPDY"
	default:
		return "websocket"
	}
}

// finish writes the last marker and closes the recording.
func (s *Session) finish() {
	failure, broken := s.failure()
	if !broken {
		label := "end"
		switch {
		case failure != nil && s.rec.opts.FailClosed:
			label = "recording failed, session cut: " + failure.Error()
		case failure != nil:
			label = "recording stopped: " + failure.Error()
		}
		err := s.cast.Marker(s.rec.opts.Clock.Since(s.meta.Started), label)
		err = errors.Join(err, s.cast.Finish(), s.out.Flush())
		if err != nil {
			s.fail(err, true)
		}
	}
	s.out.drop()
	if err := s.file.Close(); err != nil {
		s.fail(fmt.Errorf("close the recording: %w", err), true)
	}
	result := resultRecorded
	switch failure, _ := s.failure(); {
	case failure != nil && s.rec.opts.FailClosed:
		result = resultFailedClosed
	case failure != nil:
		result = resultFailedOpen
	}
	recordings.WithLabelValues(result).Inc()
}

// await waits for the recording to be written and closed, unless it stalls.
func (s *Session) await() {
	if s.stalled.Load() {
		return
	}
	progress := s.q.progress()
	timer := s.rec.opts.Clock.NewTimer(s.rec.opts.StallTimeout)
	defer timer.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-progress:
			if s.stalled.Load() {
				return
			}
			progress = s.q.progress()
			restart(timer, s.rec.opts.StallTimeout)
		case <-timer.C():
			s.stall()
			return
		}
	}
}

// output, input and resize are what the decoders found.
func (s *Session) output(at time.Duration, data []byte) {
	s.wrote(s.cast.Output(at, data))
}

func (s *Session) input(at time.Duration, data []byte) {
	if s.rec.opts.RecordStdin {
		s.wrote(s.cast.Input(at, data))
	}
}

func (s *Session) resize(at time.Duration, width, height int) {
	s.wrote(s.cast.Resize(at, width, height))
}

func (s *Session) wrote(err error) {
	if err != nil {
		s.fail(err, true)
	}
}

// countingWriter counts what reaches the sink.
type countingWriter struct {
	w      io.Writer
	health *sinkHealth
}

func (c countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	recordingBytes.Add(float64(n))
	if err == nil {
		c.health.works()
	}
	return n, err
}

type closeWriter interface{ CloseWrite() error }

// tap is the wrapped connection.
type tap struct {
	s         *Session
	backend   io.ReadWriteCloser
	closeOnce sync.Once
	closeErr  error
}

func (t *tap) Read(b []byte) (int, error) {
	if err := t.s.room(len(b)); err != nil {
		return 0, err // failing closed: what the recording cannot hold does not reach the client
	}
	n, err := t.backend.Read(b)
	if n > 0 && !t.s.stopped.Load() {
		t.s.q.push(false, b[:n])
	}
	return n, err
}

// WriteTo is how io.Copy, and so ReverseProxy, copies what the cluster sends to the client. It reads into the
// recorder's blocks, so that a large read is queued as it is, without a copy, once the client has it.
func (t *tap) WriteTo(w io.Writer) (int64, error) {
	blk := blocks.Get().(*block)
	defer func() { blocks.Put(blk) }()
	var written int64
	for {
		if err := t.s.room(blockSize); err != nil {
			return written, err // failing closed: what the recording cannot hold does not reach the client
		}
		n, err := t.backend.Read(blk[:])
		if n > 0 {
			m, werr := w.Write(blk[:n])
			written += int64(m)
			// Recorded is what the client got, which a failed write may have cut short.
			if m > 0 && !t.s.stopped.Load() && t.s.q.pushBlock(false, blk, m) {
				blk = blocks.Get().(*block)
			}
			if werr == nil && m < n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return written, werr
			}
		}
		if errors.Is(err, io.EOF) {
			return written, nil
		}
		if err != nil {
			return written, err
		}
	}
}

func (t *tap) Write(b []byte) (int, error) {
	// Queued before the cluster has it, so that a stream the client opens is known before the cluster answers on it.
	if len(b) > 0 {
		if err := t.s.room(len(b)); err != nil {
			return 0, err
		}
		if !t.s.stopped.Load() {
			t.s.q.push(true, b)
		}
	}
	return t.backend.Write(b)
}

func (t *tap) Close() error {
	t.closeOnce.Do(func() {
		t.closeErr = t.backend.Close()
		t.s.q.close()
		t.s.await()
	})
	return t.closeErr
}

// tapCloseWriter keeps the half-close of a backend that has one, which ReverseProxy uses when the client stops
// sending.
type tapCloseWriter struct{ *tap }

func (t tapCloseWriter) CloseWrite() error { return t.backend.(closeWriter).CloseWrite() }
