//go:build bench

package dataplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/klog/v2"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/sessionrec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/userserver"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/benchmeasure"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/asciicast"
)

const (
	execSize   = 100 << 20 // output of one exec
	execRounds = 7
	// execToken is the cluster's own token the exec goes with: the kube-apiserver stand-in's TokenReview knows it.
	execToken = "bench-token"
	// execLimit bounds one exec, and the wait for its recording to close.
	execLimit = 2 * time.Minute
)

// The exec protocols, as client-go's executors speak them: websocket (v5.channel.k8s.io, kubectl's default) and SPDY
// (v4.channel.k8s.io, its fallback).
const (
	execWebSocket = "websocket"
	execSPDY      = "spdy"
)

// execPath is the user-server path of an exec of "stream <execSize>" in default/bench, stdout only.
func execPath() string {
	q := url.Values{"container": {"main"}, "command": {"stream", strconv.Itoa(execSize)}, "stdout": {"true"},
		"stderr": {"false"}, "stdin": {"false"}, "tty": {"false"}}
	return "/" + cluster + "/api/v1/namespaces/default/pods/bench/exec?" + q.Encode()
}

// serveKubeExec makes tg answer as the managed kube-apiserver does the two requests of an exec with a token of the
// cluster: the service-proxy's TokenReview (execToken authenticates as bench-user, any other token does not), and
// the exec itself.
func serveKubeExec(tg *target) {
	tg.mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", tokenReview)
	tg.mux.HandleFunc("/api/v1/namespaces/{namespace}/pods/{pod}/exec", serveExec)
}

// tokenReview answers a TokenReview, which client-go sends as protobuf, in JSON.
func tokenReview(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	obj, err := runtime.Decode(kubescheme.Codecs.UniversalDeserializer(), body)
	review, ok := obj.(*authenticationv1.TokenReview)
	if err != nil || !ok {
		http.Error(w, fmt.Sprintf("not a TokenReview: %v", err), http.StatusBadRequest)
		return
	}
	review.Status = authenticationv1.TokenReviewStatus{}
	if review.Spec.Token == execToken {
		review.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
			User: authenticationv1.UserInfo{Username: "bench-user", Groups: []string{"system:authenticated"}}}
	}
	review.APIVersion, review.Kind = authenticationv1.SchemeGroupVersion.String(), "TokenReview"
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(review)
}

// serveExec runs "stream <n>", which writes n bytes of text on stdout, over websocket v5.channel.k8s.io as the
// kube-apiserver serves websocket clients, or SPDY v4.channel.k8s.io as the kubelet serves it: both from
// k8s.io/streaming, as internal/server/sessionrec's test cluster builds them.
func serveExec(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	command := q["command"]
	n, err := 0, errors.New("want the command stream <n>")
	if len(command) == 2 && command[0] == "stream" {
		n, err = strconv.Atoi(command[1])
	}
	if err != nil || q.Get("stdout") != "true" || q.Get("stdin") == "true" || q.Get("tty") == "true" {
		http.Error(w, fmt.Sprintf("only a non-interactive exec of stream <n> with stdout is served: %v", err), http.StatusBadRequest)
		return
	}
	stderr := q.Get("stderr") == "true"
	if wsstream.IsWebSocketRequest(r) {
		// It closes the connection after the status, and wsstream logs its reader's end as an error: the stand-in's,
		// not the path's under test.
		r = r.WithContext(klog.NewContext(r.Context(), logr.Discard()))
		serveWebSocketExec(w, r, n, stderr)
		return
	}
	serveSPDYExec(w, r, n, stderr)
}

// serveWebSocketExec is the kube-apiserver's websocket exec: v5.channel.k8s.io.
func serveWebSocketExec(w http.ResponseWriter, r *http.Request, n int, stderr bool) {
	errChannel := wsstream.IgnoreChannel
	if stderr {
		errChannel = wsstream.WriteChannel
	}
	channels := []wsstream.ChannelType{wsstream.IgnoreChannel, wsstream.WriteChannel, errChannel, wsstream.WriteChannel, wsstream.IgnoreChannel}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{"v5.channel.k8s.io": {Binary: true, Channels: channels}})
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	_, _ = streams[1].Write(nil) // an empty message on stdout tells the client the streams are open
	streamText(streams[1], n)
	_, _ = streams[3].Write([]byte(`{"status":"Success"}`))
}

// serveSPDYExec is the kubelet's exec over SPDY: v4.channel.k8s.io.
func serveSPDYExec(w http.ResponseWriter, r *http.Request, n int, stderr bool) {
	if _, err := httpstream.Handshake(r, w, []string{"v4.channel.k8s.io"}); err != nil {
		return
	}
	type arrival struct {
		stream  httpstream.Stream
		replied <-chan struct{}
	}
	arrivals := make(chan arrival, 4)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, replied <-chan struct{}) error {
		arrivals <- arrival{s, replied}
		return nil
	})
	if conn == nil {
		return
	}
	defer func() { _ = conn.Close() }()
	want := 2 // error and stdout
	if stderr {
		want++
	}
	streams := map[string]httpstream.Stream{}
	expired := time.After(30 * time.Second)
	for len(streams) < want {
		select {
		case a := <-arrivals:
			select {
			case <-a.replied:
			case <-expired:
				return
			}
			streams[a.stream.Headers().Get("streamType")] = a.stream
		case <-expired:
			return
		}
	}
	streamText(streams["stdout"], n)
	for _, name := range []string{"stdout", "stderr"} {
		if s, ok := streams[name]; ok {
			_ = s.Close()
		}
	}
	_, _ = streams["error"].Write([]byte(`{"status":"Success"}`))
	_ = streams["error"].Close()
}

// execChunk is what "stream" writes at a time, as the kubelet copies a process's output: 32 KiB of 80-byte lines of
// text, with no "\r" in them (checkRecording relies on it).
var execChunk = func() []byte {
	line := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog 0123456789 ", 2)[:79] + "\n")
	chunk := make([]byte, 0, 32<<10)
	for len(chunk)+len(line) <= cap(chunk) {
		chunk = append(chunk, line...)
	}
	return chunk
}()

// streamText writes n bytes: execChunk over and over.
func streamText(w io.Writer, n int) {
	for n > 0 {
		k := min(n, len(execChunk))
		if _, err := w.Write(execChunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// execSum is the SHA-256 of an exec's whole output.
var execSum = func() [sha256.Size]byte {
	h := sha256.New()
	streamText(h, execSize)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}()

// closeWatcher is the recorded user-server's sink: a DirSink that says when a recording is closed, which is when the
// recorder has written all of it.
type closeWatcher struct {
	sessionrec.DirSink
	closed chan string // the recording's file
}

func (s closeWatcher) Create(m sessionrec.Meta) (io.WriteCloser, error) {
	f, err := s.DirSink.Create(m)
	if err != nil {
		return nil, err
	}
	rel, err := sessionrec.RecordingPath(m)
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return &watchedFile{WriteCloser: f, path: filepath.Join(s.Dir, filepath.FromSlash(rel)), closed: s.closed}, nil
}

type watchedFile struct {
	io.WriteCloser
	path   string
	closed chan<- string
}

func (f *watchedFile) Close() error {
	err := f.WriteCloser.Close()
	f.closed <- f.path
	return err
}

// execOutput is the client's stdout: it counts, and hashes when sum is set.
type execOutput struct {
	mu  sync.Mutex
	n   int64
	sum hash.Hash
}

func (o *execOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n += int64(len(p))
	if o.sum != nil {
		o.sum.Write(p)
	}
	return len(p), nil
}

func (o *execOutput) received() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// execMode is one mode of the exec phase: a protocol, through the world's user-server or the recorded one.
type execMode struct {
	protocol string
	recorded bool
	addr     string // the user-server
	rates    []float64
	cost     cost
	errs     errs
}

func (m *execMode) key() string {
	if m.recorded {
		return m.protocol + "-recorded"
	}
	return m.protocol
}

func (m *execMode) label() string {
	if m.recorded {
		return "exec over " + m.protocol + ", full path, recorded (asciicast, file)"
	}
	return "exec over " + m.protocol + ", full path"
}

// execResult is what the exec phase measured: median MiB/s by mode key.
type execResult struct {
	rates      map[string]float64
	recordings int // recordings checked whole
}

// execute runs one exec through the user-server at m.addr as kubectl does, with client-go's executor of m.protocol
// and a token of the cluster.
func (b *bench) execute(ctx context.Context, m *execMode, stdout io.Writer) error {
	cfg := &rest.Config{Host: "https://" + m.addr, BearerToken: execToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: b.w.pki.ca.CertPEM}}
	target := cfg.Host + execPath()
	var exec remotecommand.Executor
	var err error
	switch m.protocol {
	case execSPDY:
		u, perr := url.Parse(target)
		if perr != nil {
			return perr
		}
		exec, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	default:
		exec, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, target)
	}
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout})
}

// exec streams 100 MiB of an exec's stdout to the client per round and mode, over websocket and SPDY, through the
// world's user-server and through a second one of the same proxy-server that records sessions (sessionrec, the
// default options, a DirSink), rounds interleaved. A recorded round lasts until its recording is closed; then, outside
// the time, its recording must hold the whole output the client received, and is removed.
func (b *bench) exec() *execResult {
	ctx := context.Background()
	dir := b.t.TempDir()
	closed := make(chan string, 8)
	recorder := sessionrec.New(sessionrec.Options{Sink: closeWatcher{DirSink: sessionrec.DirSink{Dir: dir}, closed: closed}})
	recordedAddr, _ := b.w.ours.startUser(b.t, func(o *userserver.Options) { o.Sessions = recorder })
	res := &execResult{rates: map[string]float64{}}

	// run execs once through m and returns how long it took, its recording's file for a recorded mode.
	run := func(m *execMode, stdout *execOutput) (took cost, recording string, err error) {
		ctx, cancel := context.WithTimeout(ctx, execLimit)
		defer cancel()
		start := sample()
		err = b.execute(ctx, m, stdout)
		if m.recorded {
			select {
			case recording = <-closed:
			case <-time.After(execLimit):
				err = errors.Join(err, errors.New("the recording was not closed within "+execLimit.String()))
			}
		}
		took = since(start)
		if err == nil && stdout.received() != execSize {
			err = fmt.Errorf("the client received %d bytes of output, want %d", stdout.received(), execSize)
		}
		return took, recording, err
	}
	// check checks the recording of a run that succeeded, and removes it.
	check := func(m *execMode, recording string, received int64, ran error) {
		if recording == "" {
			return
		}
		defer func() { _ = os.Remove(recording) }()
		if ran != nil {
			return
		}
		if err := checkRecording(recording, received); err != nil {
			m.errs.add(err)
			return
		}
		res.recordings++
	}

	var modes []*execMode
	for _, protocol := range []string{execWebSocket, execSPDY} {
		for _, recorded := range []bool{false, true} {
			m := &execMode{protocol: protocol, recorded: recorded, addr: b.w.ours.addrs.UserServer}
			if recorded {
				m.addr = recordedAddr
			}
			// The warm-up also checks the bytes: the client's and the recording's.
			stdout := &execOutput{sum: sha256.New()}
			_, recording, err := run(m, stdout)
			if err == nil && !bytes.Equal(stdout.sum.Sum(nil), execSum[:]) {
				err = errors.New("the client's output differs from the command's")
			}
			if err != nil {
				b.t.Errorf("exec warm-up, %s: %v", m.label(), err)
			}
			check(m, recording, stdout.received(), err)
			modes = append(modes, m)
		}
	}
	rotate(execRounds, modes, func(m *execMode, _ int) {
		stdout := &execOutput{}
		took, recording, err := run(m, stdout)
		if err != nil {
			m.errs.add(err)
		} else {
			m.rates = append(m.rates, execSize/mib/took.wall.Seconds())
			m.cost.add(took)
		}
		check(m, recording, stdout.received(), err)
	})

	out := newTable(b.out, "mode", "MiB/s median", "(min-max)", "CPU ms per 100 MiB", "other procs CPU s", "vs unrecorded")
	for _, m := range modes {
		res.rates[m.key()] = benchmeasure.Median(m.rates)
	}
	for _, m := range modes {
		lo, hi := minMax(m.rates)
		cpu := 0.0
		if len(m.rates) > 0 {
			cpu = float64(m.cost.self.Microseconds()) / 1000 / float64(len(m.rates))
		}
		vs := ""
		if m.recorded {
			vs = ratio(res.rates[m.key()], res.rates[m.protocol])
		}
		out.row(m.label(), fmt.Sprintf("%.0f", res.rates[m.key()]), fmt.Sprintf("(%.0f-%.0f)", lo, hi), fmt.Sprintf("%.0f", cpu),
			secs(m.cost.other), vs)
		b.fig.Exec = append(b.fig.Exec, execFigures{Mode: m.key(), Protocol: m.protocol, Recorded: m.recorded,
			MiBPerSecond: res.rates[m.key()], CPUMillisPer100MiB: cpu})
		b.check("exec", &route{label: m.label()}, &m.errs)
	}
	out.flush()
	fmt.Fprintf(b.out, "recordings checked whole (the output the client received, the end marker) and removed: %d\n", res.recordings)
	for _, protocol := range []string{execWebSocket, execSPDY} {
		recorded, plain := res.rates[protocol+"-recorded"], res.rates[protocol]
		fmt.Fprintf(b.out, "target: recorded exec over %s keeps >= %.1fx the unrecorded throughput: %s %s\n", protocol, targetRecordedExec,
			ratio(recorded, plain), verdict(recorded/plain, targetRecordedExec, true))
	}
	return res
}

// checkRecording reads a recording of "stream": its output, less the "\r" the recorder writes before each "\n" of a
// session without a terminal (the command writes none), must be the received bytes the command wrote, and it must
// end with the "end" marker.
func checkRecording(path string, received int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	r, err := asciicast.NewReader(f)
	if err != nil {
		return fmt.Errorf("recording %s: %w", path, err)
	}
	sum := sha256.New()
	var n int64
	var last asciicast.Event
	for {
		e, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("recording %s: %w", path, err)
		}
		last = e
		if e.Type == asciicast.Output {
			data := strings.ReplaceAll(e.Data, "\r", "")
			n += int64(len(data))
			_, _ = io.WriteString(sum, data)
		}
	}
	switch {
	case n != received:
		return fmt.Errorf("recording %s: %d bytes of output, the client received %d", path, n, received)
	case !bytes.Equal(sum.Sum(nil), execSum[:]):
		return fmt.Errorf("recording %s: the output differs from the command's", path)
	case last.Type != asciicast.Marker || last.Data != "end":
		return fmt.Errorf("recording %s: it ends with %q %q, not the end marker", path, last.Type, last.Data)
	}
	return nil
}
