//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testsupport/soak"
)

const (
	// streamOpenWithin bounds the wait for a stream's request to be answered.
	streamOpenWithin = 30 * time.Second
	// markRequestTimeout bounds each request that makes a mark directly on a cluster.
	markRequestTimeout = 10 * time.Second
)

// longStream is one long-lived stream through one way in to one cluster: a watch of the stream-mark namespace, or an
// exec of 'probe cat' in, a followed log of or a port-forward to the probe pod. Through a proxy-server that goes away
// it may end, with an error, or carry on through another replica; it must never hang.
type longStream struct {
	name loopName
	kind string
	// answers tells whether the stream carries mark end to end now; it is asked until it does.
	answers func(mark string) bool
	// release ends the stream from this side and frees what it holds; close calls it once.
	release   func()
	closeOnce sync.Once
	// done is closed once the stream has ended; closed once it was closed from this side.
	done, closed chan struct{}
	mu           sync.Mutex
	ended        bool
	err          error
}

func newLongStream(kind string, answers func(mark string) bool, release func()) *longStream {
	return &longStream{kind: kind, answers: answers, release: release, done: make(chan struct{}), closed: make(chan struct{})}
}

func (s *longStream) String() string { return fmt.Sprintf("the %s stream to %s", s.kind, s.name) }

// end records that the stream ended with err; the first end counts.
func (s *longStream) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.ended, s.err = true, err
		close(s.done)
	}
}

// Ended reports whether the stream has ended.
func (s *longStream) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// Carries reports whether the stream carries mark end to end now.
func (s *longStream) Carries(mark string) bool { return s.answers(mark) }

// why says how the stream ended.
func (s *longStream) why() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return "no error: the stream closed"
	}
	return s.err.Error()
}

// close ends the stream from this side, if it runs, and frees what it holds.
func (s *longStream) close() {
	s.closeOnce.Do(func() {
		close(s.closed)
		s.release()
	})
}

// probed is streams as a hang probe sees them.
func probed(streams []*longStream) []soak.Probed {
	out := make([]soak.Probed, len(streams))
	for i, s := range streams {
		out[i] = s
	}
	return out
}

// streamSlot is a long-lived stream to keep open: its kind, through one way in to one cluster, and how to open one.
type streamSlot struct {
	name loopName
	kind string
	open func(c context.Context) (*longStream, error)
}

func (s streamSlot) String() string { return fmt.Sprintf("the %s stream to %s", s.kind, s.name) }

func (s streamSlot) soakSlot() soak.StreamSlot {
	return soak.StreamSlot{Way: s.name.way, Cluster: s.name.cluster, Kind: s.kind}
}

// streamSlotsOf are the streams through way: a watch of the stream-mark namespace, and when the way carries them an
// exec into, a followed log of and a port-forward to the probe pod, each with the config way.streams gives as it
// opens. A stream ends when the context it opened with does.
func streamSlotsOf(name loopName, way wayIn) []streamSlot {
	GinkgoHelper()
	slots := []streamSlot{{kind: "watch", open: func(c context.Context) (*longStream, error) { return openWatchStream(c, way.requests) }}}
	if way.streams != nil {
		direct := must(kubernetes.NewForConfig(managedConfig(name.cluster))).CoreV1().Pods(workloadNamespace)
		toProbe := func(open func(c context.Context, cfg *rest.Config, pod string) (*longStream, error)) func(context.Context) (*longStream, error) {
			return func(c context.Context) (*longStream, error) {
				cfg, err := way.streams()
				if err != nil {
					return nil, err
				}
				listing, cancel := context.WithTimeout(c, streamOpenWithin)
				defer cancel()
				pod, err := findProbePod(listing, cfg)
				if err != nil {
					return nil, err
				}
				return open(c, cfg, pod)
			}
		}
		slots = append(slots,
			streamSlot{kind: "exec", open: toProbe(openExecStream)},
			streamSlot{kind: "logs -f", open: toProbe(func(c context.Context, cfg *rest.Config, pod string) (*longStream, error) {
				return openLogStream(c, cfg, pod, direct)
			})},
			streamSlot{kind: "port-forward", open: toProbe(openPortForwardStream)},
		)
	}
	for i := range slots {
		slots[i].name = name
		kind, open := slots[i].kind, slots[i].open
		slots[i].open = func(c context.Context) (*longStream, error) {
			s, err := open(c)
			if err != nil {
				return nil, fmt.Errorf("open the %s stream to %s: %w", kind, name, err)
			}
			s.name = name
			return s, nil
		}
	}
	return slots
}

// openWithin returns what open returns, calling cancel, which ends the stream open opens, if open has not returned
// within streamOpenWithin.
func openWithin[T any](cancel context.CancelFunc, open func() (T, error)) (T, error) {
	timer := time.AfterFunc(streamOpenWithin, cancel)
	defer timer.Stop()
	return open()
}

// openWatchStream watches the stream-mark namespace with cfg; a mark is a change of its label, made directly on the
// cluster (setStreamMark). A watch ends with the message of its error Status, if any.
func openWatchStream(c context.Context, cfg *rest.Config) (*longStream, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	streaming, cancel := context.WithCancel(c)
	w, err := openWithin(cancel, func() (watch.Interface, error) {
		return cs.CoreV1().Namespaces().Watch(streaming, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", streamMark).String()})
	})
	if err != nil {
		cancel()
		return nil, err
	}
	r := followWatch(w)
	s := newLongStream("watch", func(mark string) bool {
		return slices.ContainsFunc(r.objects(), func(o runtime.Object) bool {
			ns, ok := o.(*corev1.Namespace)
			return ok && ns.Labels["mark"] == mark
		})
	}, func() {
		cancel()
		w.Stop()
	})
	go func() {
		<-r.done
		var status error
		for _, o := range r.objects() {
			if st, ok := o.(*metav1.Status); ok {
				status = errors.New(st.Message)
			}
		}
		s.end(status)
	}()
	return s, nil
}

// lines keeps what a stream wrote.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

// resend makes a stream's mark again while the stream has not carried it: a mark made before the stream truly
// follows (a log's follow begins after its response headers) would otherwise never show.
type resend struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// markResendEvery is how long a mark is waited for before it is made again.
const markResendEvery = 3 * time.Second

func (o *resend) do(mark string, f func()) {
	o.mu.Lock()
	if o.last == nil {
		o.last = map[string]time.Time{}
	}
	due := time.Since(o.last[mark]) >= markResendEvery
	if due {
		o.last[mark] = time.Now()
	}
	o.mu.Unlock()
	if due {
		go f()
	}
}

// openExecStream runs 'probe cat' in pod with the fallback executor (websocket, then SPDY) as kubectl does; a mark
// written to its input must come back on its output.
func openExecStream(c context.Context, cfg *rest.Config, pod string) (*longStream, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(workloadNamespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"/probe", "cat"}, Stdin: true, Stdout: true, Stderr: true},
			clientgoscheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, req.URL().String())
	if err != nil {
		return nil, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	if err != nil {
		return nil, err
	}
	executor, err := remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure)
	if err != nil {
		return nil, err
	}
	in, input := io.Pipe()
	out := &lines{}
	streaming, cancel := context.WithCancel(c)
	var sent resend
	s := newLongStream("exec", func(mark string) bool {
		sent.do(mark, func() { _, _ = fmt.Fprintln(input, "mark "+mark) })
		return out.contains("mark " + mark + "\n")
	}, func() {
		cancel()
		_ = input.Close()
	})
	go func() {
		s.end(executor.StreamWithContext(streaming, remotecommand.StreamOptions{Stdin: in, Stdout: out, Stderr: out}))
	}()
	return s, nil
}

// openLogStream follows pod's log; a mark is a request to the probe made directly on the cluster (direct, its pods/proxy),
// which the probe logs. The request is made again until it is answered: the cluster may just be back on the network.
func openLogStream(c context.Context, cfg *rest.Config, pod string, direct typedcorev1.PodInterface) (*longStream, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	streaming, cancel := context.WithCancel(c)
	body, err := openWithin(cancel, func() (io.ReadCloser, error) {
		return cs.CoreV1().Pods(workloadNamespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true, TailLines: new(int64)}).Stream(streaming)
	})
	if err != nil {
		cancel()
		return nil, err
	}
	out := &lines{}
	var sent resend
	s := newLongStream("logs -f", func(mark string) bool {
		sent.do(mark, func() { markByRequest(streaming, direct, pod, mark) })
		return out.contains("GET /healthz?mark=" + mark + "\n")
	}, cancel)
	go func() {
		defer func() { _ = body.Close() }()
		r := bufio.NewReader(body)
		for {
			line, err := r.ReadString('\n')
			_, _ = out.Write([]byte(line))
			if err != nil {
				s.end(err)
				return
			}
		}
	}()
	return s, nil
}

// markByRequest GETs the probe's /healthz?mark=<mark> through direct, up to ten times until it is answered, or until
// c ends.
func markByRequest(c context.Context, direct typedcorev1.PodInterface, pod, mark string) {
	for range 10 {
		attempt, cancel := context.WithTimeout(c, markRequestTimeout)
		_, err := direct.ProxyGet("http", pod, "8080", "/healthz", map[string]string{"mark": mark}).DoRaw(attempt)
		cancel()
		if err == nil || c.Err() != nil {
			return
		}
		select {
		case <-c.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// openPortForwardStream forwards a local port to the probe's :8080 with client-go's port-forward (SPDY over
// websocket); a mark is a GET through it. It ends when c does.
func openPortForwardStream(c context.Context, cfg *rest.Config, pod string) (*longStream, error) {
	local, stop, done, err := openPortForward(cfg, pod, true, 8080)
	if err != nil {
		return nil, err
	}
	var stopOnce sync.Once
	release := func() { stopOnce.Do(func() { close(stop) }) }
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	s := newLongStream("port-forward", func(mark string) bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz?pf=%s", local, mark))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, release)
	go func() {
		select {
		case err := <-done:
			s.end(err)
		case <-c.Done():
			release()
			s.end(<-done)
		}
	}()
	return s, nil
}
