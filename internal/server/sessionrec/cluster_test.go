package sessionrec

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/streaming/pkg/httpstream/spdy"
	"k8s.io/streaming/pkg/httpstream/wsstream"
)

// This file is a managed cluster's exec endpoint as the user-server reaches it, and the user-server's reverse proxy.
// k8s.io/kubelet v0.37.0 no longer holds the kubelet's streaming server (it moved to k8s.io/cri-streaming, a module
// this repository does not require), so the exec server is built as that one is, from k8s.io/streaming: its SPDY
// upgrader with the v4.channel.k8s.io streams, as the kubelet serves them, and its websocket channels with
// v5.channel.k8s.io, as the kube-apiserver serves websocket clients (k8s.io/apiserver's StreamTranslatorHandler,
// which would need a module more, github.com/mxk/go-flowrate).

// startCluster serves exec on /api/v1/namespaces/<ns>/pods/<pod>/exec, running testShell.
func startCluster(t testing.TB) *url.URL {
	t.Helper()
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts := execOptions(r.URL.Query())
		if wsstream.IsWebSocketRequest(r) {
			serveWebSocketExec(w, r, opts)
			return
		}
		serveSPDYExec(w, r, opts)
	}))
	t.Cleanup(server.Close)
	u, err := url.Parse(server.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

type execOpts struct{ stdin, stdout, stderr, tty bool }

// execOptions reads the streams a client asks for as the kube-apiserver does.
func execOptions(q url.Values) execOpts {
	flag := func(name string) bool {
		v := q[name]
		return len(v) > 0 && v[0] != "0" && !strings.EqualFold(v[0], "false")
	}
	return execOpts{stdin: flag("stdin"), stdout: flag("stdout"), stderr: flag("stderr"), tty: flag("tty")}
}

type terminalSize struct{ Width, Height uint16 }

// serveSPDYExec is the kubelet's exec server for SPDY v4.channel.k8s.io.
func serveSPDYExec(w http.ResponseWriter, r *http.Request, opts execOpts) {
	if _, err := httpstream.Handshake(r, w, []string{"v4.channel.k8s.io"}); err != nil {
		return
	}
	type arrival struct {
		stream  httpstream.Stream
		replied <-chan struct{}
	}
	arrivals := make(chan arrival, 8)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, r, func(s httpstream.Stream, replied <-chan struct{}) error {
		arrivals <- arrival{s, replied}
		return nil
	})
	if conn == nil {
		return
	}
	defer func() { _ = conn.Close() }()
	want := 1 // error
	for _, asked := range []bool{opts.stdin, opts.stdout, opts.stderr, opts.tty} {
		if asked {
			want++
		}
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
	var stdin io.Reader = strings.NewReader("")
	if s, ok := streams["stdin"]; ok {
		stdin = s
	}
	stdout, stderr := io.Discard, io.Discard
	if s, ok := streams["stdout"]; ok {
		stdout = s
	}
	if s, ok := streams["stderr"]; ok {
		stderr = s
	}
	var resize io.Reader
	if s, ok := streams["resize"]; ok {
		resize = s
	}
	code := testShell(r.URL.Query()["command"], stdin, stdout, stderr, opts.tty, readResizes(r.Context(), resize))
	for _, name := range []string{"stdout", "stderr"} {
		if s, ok := streams[name]; ok {
			_ = s.Close()
		}
	}
	_, _ = streams["error"].Write(exitStatus(code))
	_ = streams["error"].Close()
}

// serveWebSocketExec is the kube-apiserver's websocket exec server: v5.channel.k8s.io.
func serveWebSocketExec(w http.ResponseWriter, r *http.Request, opts execOpts) {
	channel := func(asked bool, kind wsstream.ChannelType) wsstream.ChannelType {
		if asked {
			return kind
		}
		return wsstream.IgnoreChannel
	}
	channels := []wsstream.ChannelType{channel(opts.stdin, wsstream.ReadChannel), channel(opts.stdout, wsstream.WriteChannel),
		channel(opts.stderr, wsstream.WriteChannel), wsstream.WriteChannel, wsstream.ReadChannel}
	conn := wsstream.NewConn(map[string]wsstream.ChannelProtocolConfig{"v5.channel.k8s.io": {Binary: true, Channels: channels}})
	_, streams, err := conn.Open(w, r)
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	// An empty message on the first output channel tells the client the streams are open.
	if opts.stdout {
		_, _ = streams[1].Write(nil)
	} else {
		_, _ = streams[3].Write(nil)
	}
	var resize io.Reader
	if opts.tty {
		resize = streams[4]
	}
	code := testShell(r.URL.Query()["command"], streams[0], streams[1], streams[2], opts.tty, readResizes(r.Context(), resize))
	_, _ = streams[3].Write(exitStatus(code))
}

// readResizes decodes the terminal sizes of a resize stream.
func readResizes(ctx context.Context, stream io.Reader) <-chan terminalSize {
	resizes := make(chan terminalSize)
	if stream == nil {
		close(resizes)
		return resizes
	}
	go func() {
		defer close(resizes)
		dec := json.NewDecoder(stream)
		for {
			var size terminalSize
			if dec.Decode(&size) != nil {
				return
			}
			select {
			case resizes <- size:
			case <-ctx.Done():
				return
			}
		}
	}()
	return resizes
}

// exitStatus is the v4 and v5 error stream's last word: a Status.
func exitStatus(code int) []byte {
	status := map[string]any{"status": "Success"}
	if code != 0 {
		status = map[string]any{"status": "Failure", "reason": "NonZeroExitCode", "message": fmt.Sprintf("command terminated with non-zero exit code: %d", code),
			"details": map[string]any{"causes": []any{map[string]any{"reason": "ExitCode", "message": strconv.Itoa(code)}}}}
	}
	b, _ := json.Marshal(status)
	return b
}

// testShell is the container's process. "sh" reads lines: "echo <text>" prints text, "warn <text>" prints it on
// stderr (stdout with a TTY), "stream <n>" prints n bytes of text, "exit" ends; with a TTY it echoes what it reads,
// as a terminal's line discipline does, and prints "resized WxH" on each resize. "stream <n>" as the command prints
// n bytes and ends.
func testShell(command []string, stdin io.Reader, stdout, stderr io.Writer, tty bool, resizes <-chan terminalSize) int {
	var mu sync.Mutex
	nl := "\n"
	if tty {
		nl = "\r\n"
		stderr = stdout
	}
	print := func(w io.Writer, s string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = io.WriteString(w, s)
	}
	go func() {
		for size := range resizes {
			print(stdout, fmt.Sprintf("resized %dx%d%s", size.Width, size.Height, nl))
		}
	}()
	if len(command) == 2 && command[0] == "stream" {
		n, _ := strconv.Atoi(command[1])
		streamText(stdout, n)
		return 0
	}
	lines := bufio.NewReader(stdin)
	for {
		line, err := lines.ReadString('\n')
		if tty && line != "" {
			print(stdout, strings.ReplaceAll(line, "\n", "\r\n"))
		}
		verb, arg, _ := strings.Cut(strings.TrimRight(line, "\r\n"), " ")
		switch verb {
		case "echo":
			print(stdout, arg+nl)
		case "warn":
			print(stderr, arg+nl)
		case "stream":
			n, _ := strconv.Atoi(arg)
			mu.Lock()
			streamText(stdout, n)
			mu.Unlock()
		case "exit":
			return 0
		}
		if err != nil {
			return 0
		}
	}
}

// streamText writes n bytes of lines of text, 32 KiB at a time as the kubelet copies a process's output.
func streamText(w io.Writer, n int) {
	line := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog 0123456789 ", 2)[:79] + "\n")
	chunk := make([]byte, 0, 32<<10)
	for len(chunk)+len(line) <= cap(chunk) {
		chunk = append(chunk, line...)
	}
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := w.Write(chunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// proxy is the user-server's reverse proxy with the recorder wired in as it will be: in ModifyResponse, for a 101.
type proxy struct {
	url      string
	sessions chan *Session
}

func startProxy(t testing.TB, cluster *url.URL, rec *Recorder) *proxy {
	t.Helper()
	p := &proxy{sessions: make(chan *Session, 64)}
	transport := &http.Transport{}
	rp := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(cluster) },
		Transport: transport,
		ModifyResponse: func(res *http.Response) error {
			if rec == nil || res.StatusCode != http.StatusSwitchingProtocols {
				return nil
			}
			m, isSession := Target(res.Request.URL.EscapedPath(), res.Request.URL.Query())
			protocol, known := ProtocolOf(res)
			if !isSession {
				return nil
			}
			if !known {
				return errors.New("a session whose protocol cannot be recorded")
			}
			m.Cluster, m.User, m.Groups, m.Via, m.Replica = "cluster1", "alice", []string{"dev", "system:authenticated"}, "user-server", "proxy-0"
			s, err := rec.Start(m)
			if err != nil {
				return err
			}
			p.sessions <- s
			res.Body = s.Wrap(res.Body.(io.ReadWriteCloser), protocol)
			return nil
		},
		ErrorLog: nil,
	}
	server := httptest.NewServer(rp)
	t.Cleanup(func() {
		server.Close()
		transport.CloseIdleConnections()
	})
	p.url = server.URL
	return p
}

// execPath is the kube-apiserver path of an exec of command in ns1/pod1/c1, interactive (stdin) or not.
func execPath(interactive, tty bool, command ...string) string {
	q := url.Values{"container": {"c1"}, "command": command, "stdin": {strconv.FormatBool(interactive)}, "stdout": {"true"},
		"stderr": {strconv.FormatBool(!tty)}, "tty": {strconv.FormatBool(tty)}}
	return "/api/v1/namespaces/ns1/pods/pod1/exec?" + q.Encode()
}

// execute runs an exec through the proxy as kubectl does, over SPDY or websocket (v5.channel.k8s.io).
func execute(ctx context.Context, proxyURL, protocol, path string, opts remotecommand.StreamOptions) error {
	cfg := &rest.Config{Host: proxyURL}
	var exec remotecommand.Executor
	var err error
	switch protocol {
	case "spdy":
		u, perr := url.Parse(proxyURL + path)
		if perr != nil {
			return perr
		}
		exec, err = remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	case "websocket":
		exec, err = remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, proxyURL+path)
	default:
		return fmt.Errorf("protocol %q", protocol)
	}
	if err != nil {
		return err
	}
	return exec.StreamWithContext(ctx, opts)
}

// sizeQueue hands client-go the terminal sizes sent on it.
type sizeQueue chan remotecommand.TerminalSize

func (q sizeQueue) Next() *remotecommand.TerminalSize {
	size, ok := <-q
	if !ok {
		return nil
	}
	return &size
}

// syncBuffer is a client's stdout or stderr that the test reads while the session runs.
type syncBuffer struct {
	mu        sync.Mutex
	b         strings.Builder
	n         int
	countOnly bool // keep only the count
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += len(p)
	if !b.countOnly {
		b.b.Write(p)
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}
