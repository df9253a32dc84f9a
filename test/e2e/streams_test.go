//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
)

// longStream is one long-lived stream to the probe pod through one way in: an exec of 'probe cat', a followed log, or
// a port-forward. Through a proxy-server that goes away it may end, with an error, or carry on through another
// replica; it must never hang.
type longStream struct {
	kind string
	// answers tells whether the stream carries mark end to end now; it is asked until it does.
	answers func(mark string) bool
	mu      sync.Mutex
	done    bool
	err     error
}

func (s *longStream) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.done, s.err = true, err
}

// ended reports whether the stream has ended, and how.
func (s *longStream) ended() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.done {
		return false, ""
	}
	if s.err == nil {
		return true, "no error: the stream closed"
	}
	return true, s.err.Error()
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

// once runs each mark's action once, so asking again does not repeat it.
type once struct {
	mu   sync.Mutex
	done map[string]bool
}

func (o *once) do(mark string, f func()) {
	o.mu.Lock()
	first := !o.done[mark]
	if o.done == nil {
		o.done = map[string]bool{}
	}
	o.done[mark] = true
	o.mu.Unlock()
	if first {
		go f()
	}
}

// startLongStreams starts an exec, a followed log and a port-forward to cluster's probe pod with cfg, and waits until
// each carries a first mark.
func startLongStreams(cluster string, cfg *rest.Config) []*longStream {
	GinkgoHelper()
	pod := probePod(cfg)
	streams := []*longStream{startExecStream(cfg, pod), startLogStream(cluster, cfg, pod), startPortForwardStream(cfg, pod)}
	for _, s := range streams {
		Eventually(func() bool { return s.answers("start") }).Should(BeTrue(), "%s %s", cluster, s.kind)
	}
	return streams
}

// startExecStream runs 'probe cat' in pod with the fallback executor (websocket, then SPDY) as kubectl does; a mark
// written to its input must come back on its output.
func startExecStream(cfg *rest.Config, pod string) *longStream {
	GinkgoHelper()
	cs := must(kubernetes.NewForConfig(cfg))
	req := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(workloadNamespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"/probe", "cat"}, Stdin: true, Stdout: true, Stderr: true},
			clientgoscheme.ParameterCodec)
	ws := must(remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, req.URL().String()))
	spdy := must(remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL()))
	executor := must(remotecommand.NewFallbackExecutor(ws, spdy, httpstream.IsUpgradeFailure))
	in, input := io.Pipe()
	out := &lines{}
	c, cancel := context.WithCancel(ctx())
	DeferCleanup(func() {
		cancel()
		_ = input.Close()
	})
	var sent once
	s := &longStream{kind: "exec", answers: func(mark string) bool {
		sent.do(mark, func() { _, _ = fmt.Fprintln(input, "mark "+mark) })
		return out.contains("mark " + mark + "\n")
	}}
	go func() {
		s.end(executor.StreamWithContext(c, remotecommand.StreamOptions{Stdin: in, Stdout: out, Stderr: out}))
	}()
	return s
}

// startLogStream follows pod's log; a mark is a request to the probe made directly on the cluster (pods/proxy), which
// the probe logs.
func startLogStream(cluster string, cfg *rest.Config, pod string) *longStream {
	GinkgoHelper()
	c, cancel := context.WithCancel(ctx())
	DeferCleanup(cancel)
	body := must(must(kubernetes.NewForConfig(cfg)).CoreV1().Pods(workloadNamespace).
		GetLogs(pod, &corev1.PodLogOptions{Follow: true, TailLines: new(int64)}).Stream(c))
	out := &lines{}
	direct := must(kubernetes.NewForConfig(managedConfig(cluster))).CoreV1().Pods(workloadNamespace)
	var sent once
	s := &longStream{kind: "logs -f", answers: func(mark string) bool {
		sent.do(mark, func() {
			_, _ = direct.ProxyGet("http", pod, "8080", "/healthz", map[string]string{"mark": mark}).DoRaw(ctx())
		})
		return out.contains("GET /healthz?mark=" + mark + "\n")
	}}
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
	return s
}

// startPortForwardStream forwards a local port to the probe's :8080 with client-go's port-forward (SPDY over
// websocket); a mark is a GET through it.
func startPortForwardStream(cfg *rest.Config, pod string) *longStream {
	GinkgoHelper()
	local, stop, done := startPortForward(cfg, pod, true, 8080)
	var stopOnce sync.Once
	DeferCleanup(func() { stopOnce.Do(func() { close(stop) }) })
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	s := &longStream{kind: "port-forward", answers: func(mark string) bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz?pf=%s", local, mark))
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}}
	go func() { s.end(<-done) }()
	return s
}
