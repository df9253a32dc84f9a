package userserver

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/sessionrec"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/asciicast"
)

// execStandIn answers an exec as a kube-apiserver speaking websocket v5.channel.k8s.io does, writing out on stdout and
// closing; any other request is answered 200.
func execStandIn(out string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/exec") || r.Header.Get("Upgrade") != "websocket" {
			_, _ = io.WriteString(w, "served")
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Accept: x\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n")
		// A binary message from the server (unmasked): channel 1, stdout.
		payload := append([]byte{1}, out...)
		_, _ = brw.Write(append([]byte{0x82, byte(len(payload))}, payload...))
		_ = brw.Flush()
	}
}

// execThrough sends an exec's websocket upgrade to the user-server at addr as the hub user, and returns the answer's
// status line, its Audit-ID and what followed it.
func execThrough(t *testing.T, addr, path string) (status, auditID, rest string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: user-server\r\nAuthorization: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"+
		"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n", path, hubToken)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusSwitchingProtocols {
		body, _ = io.ReadAll(br) // the stream, until the cluster's end closes it
	}
	return resp.Status, resp.Header.Get("Audit-ID"), string(body)
}

func TestAnExecThroughTheUserServerIsRecordedUnderItsAuditID(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	p := newPKI(t)
	rec := sessionrec.New(sessionrec.Options{Sink: sessionrec.DirSink{Dir: dir}})
	h := newHubEnvServing(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster1",
		Options{Sessions: rec, Replica: "replica-a"}, p.impersonator, execStandIn("recorded output"))
	status, id, out := execThrough(t, h.frontend.Listener.Addr().String(),
		"/cluster1/api/v1/namespaces/team/pods/web-0/exec?container=app&command=sh&stdout=true&tty=true")
	g.Expect(status).To(HavePrefix("101"))
	g.Expect(out).To(ContainSubstring("recorded output"), "the stream reached the client unchanged")
	g.Expect(h.seen.last().Header.Values("Sec-Websocket-Extensions")).To(BeEmpty(),
		"the cluster is not offered compression, which the recorder could not read")

	files, err := filepath.Glob(filepath.Join(dir, "cluster1", "*", id+".cast"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(files).To(HaveLen(1), "the recording is named by the request's audit ID")
	// The client may see the stream end before the user-server has closed the recording.
	g.Eventually(func() (string, error) {
		raw, err := os.ReadFile(files[0])
		return string(raw), err
	}).Should(ContainSubstring(`"m","end"`), "the recording is closed")
	f, err := os.Open(files[0])
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	r, err := asciicast.NewReader(f)
	g.Expect(err).NotTo(HaveOccurred())
	k := r.Header.Kubernetes
	g.Expect(k).NotTo(BeNil())
	g.Expect(k.User).To(Equal(alice.User))
	g.Expect(k.Namespace).To(Equal("team"))
	g.Expect(k.Pod).To(Equal("web-0"))
	g.Expect(k.Container).To(Equal("app"))
	g.Expect(k.Command).To(Equal([]string{"sh"}))
	g.Expect(k.Via).To(Equal("user-server"))
	g.Expect(k.Replica).To(Equal("replica-a"))
	var played strings.Builder
	g.Expect(asciicast.Play(&played, mustOpen(t, files[0]), asciicast.PlayOptions{})).To(Succeed())
	g.Expect(played.String()).To(ContainSubstring("recorded output"))
}

func TestAnExecTheClusterRefusesLeavesNoRecording(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	p := newPKI(t)
	rec := sessionrec.New(sessionrec.Options{Sink: sessionrec.DirSink{Dir: dir}})
	h := newHubEnvServing(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster1", Options{Sessions: rec},
		p.impersonator, func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "forbidden", http.StatusForbidden) })
	status, _, _ := execThrough(t, h.frontend.Listener.Addr().String(), "/cluster1/api/v1/namespaces/team/pods/web-0/exec?command=sh")
	g.Expect(status).To(HavePrefix("403"))
	var recordings []string
	g.Expect(filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			recordings = append(recordings, path)
		}
		return err
	})).To(Succeed())
	g.Expect(recordings).To(BeEmpty(), "no session happened")
}

func TestAnExecThatCannotBeRecordedIsRefusedBeforeItReachesTheClusterWhenFailingClosed(t *testing.T) {
	g := NewWithT(t)
	blocked := filepath.Join(t.TempDir(), "a-file")
	g.Expect(os.WriteFile(blocked, nil, 0o600)).To(Succeed())
	p := newPKI(t)
	rec := sessionrec.New(sessionrec.Options{Sink: sessionrec.DirSink{Dir: blocked}, FailClosed: true})
	h := newHubEnvServing(t, p, &fakeHub{allowed: map[string]bool{"cluster1": true}}, "cluster1", Options{Sessions: rec},
		p.impersonator, execStandIn("never"))
	status, _, out := execThrough(t, h.frontend.Listener.Addr().String(), "/cluster1/api/v1/namespaces/team/pods/web-0/exec?command=sh")
	g.Expect(status).To(HavePrefix("503"))
	g.Expect(out).To(ContainSubstring("this session cannot be recorded, and sessions that cannot be recorded are refused"))
	g.Expect(h.seen.count()).To(BeZero(), "nothing reached the cluster")

	code, _ := h.do(t, http.MethodGet, "/cluster1/api/v1/namespaces/team/pods", hubToken, nil, nil)
	g.Expect(code).To(Equal(http.StatusOK), "a read needs no recording")
}

func mustOpen(t *testing.T, path string) io.Reader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}
