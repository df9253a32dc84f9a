package audit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/plugin/pkg/audit/buffered"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/server/hubidentity"
)

// t0 has no digits below the microsecond, which is what an event's timestamps keep.
var t0 = time.Date(2026, 5, 4, 10, 0, 0, 123456000, time.UTC)

var alice = &hubidentity.Identity{
	User:   "alice",
	UID:    "uid-alice",
	Groups: []string{"team-a", "system:authenticated"},
	Extra:  map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=1234"}},
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startAuditor makes an Auditor of o, runs it, and shuts it down when the test ends.
func startAuditor(t testing.TB, o Options) *Auditor {
	t.Helper()
	return startAuditorWith(t, o, testHooks{})
}

func startAuditorWith(t testing.TB, o Options, hooks testHooks) *Auditor {
	t.Helper()
	a, err := newAuditor(o, hooks)
	if err != nil {
		t.Fatal(err)
	}
	a.Run(context.Background())
	t.Cleanup(a.Shutdown)
	return a
}

// decodeEvents reads JSON lines as audit.k8s.io/v1 Events, strictly: a field the type does not have fails the test.
func decodeEvents(g Gomega, data []byte) []auditv1.Event {
	var events []auditv1.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), 4<<20)
	for sc.Scan() {
		var ev auditv1.Event
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		g.Expect(dec.Decode(&ev)).To(Succeed(), "line %q", sc.Text())
		g.Expect(ev.APIVersion).To(Equal("audit.k8s.io/v1"))
		g.Expect(ev.Kind).To(Equal("Event"))
		events = append(events, ev)
	}
	g.Expect(sc.Err()).NotTo(HaveOccurred())
	return events
}

func readEvents(g Gomega, path string) []auditv1.Event {
	data, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	return decodeEvents(g, data)
}

// byID is the events of the audit ID id, in the order they were written.
func byID(events []auditv1.Event, id string) []auditv1.Event {
	var out []auditv1.Event
	for _, ev := range events {
		if string(ev.AuditID) == id {
			out = append(out, ev)
		}
	}
	return out
}

func counted(sink, result string) float64 {
	return testutil.ToFloat64(eventsTotal.WithLabelValues(sink, result))
}

func upGauge(sink string) float64 {
	return testutil.ToFloat64(sinkUp.WithLabelValues(sink))
}

func healthOf(a *Auditor, sink string) SinkHealth {
	for _, h := range a.Health() {
		if h.Sink == sink {
			return h
		}
	}
	return SinkHealth{}
}

// getPod is a plain request of a hub user.
func getPod(name string) Request {
	return Request{
		Via:         "aggregated",
		Cluster:     "cluster-a",
		User:        alice,
		Method:      http.MethodGet,
		EscapedPath: "/api/v1/namespaces/default/pods/" + name,
		Header:      http.Header{"User-Agent": {"kubectl/v1.37.0"}},
		SourceIPs:   []string{"10.0.0.7"},
		Received:    t0,
	}
}

// failingWriter stands for a log file whose volume fills up: it fails while fail is set.
type failingWriter struct {
	mu   sync.Mutex
	fail bool
	buf  bytes.Buffer
}

func (w *failingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fail {
		return 0, &os.PathError{Op: "write", Path: "/var/log/audit.log", Err: syscall.ENOSPC}
	}
	return w.buf.Write(p)
}

func (w *failingWriter) setFail(fail bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.fail = fail
}

func (w *failingWriter) bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.buf.Bytes())
}

// gatedWriter holds its first write until open is called.
type gatedWriter struct {
	failingWriter
	entered, release chan struct{}
	once, opened     sync.Once
}

// open lets the held write go on; it is safe to call more than once (test cleanups do, so that a failed test does
// not leave Shutdown waiting for the write forever).
func (w *gatedWriter) open() { w.opened.Do(func() { close(w.release) }) }

func newGatedWriter() *gatedWriter {
	return &gatedWriter{entered: make(chan struct{}), release: make(chan struct{})}
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		<-w.release
	})
	return w.failingWriter.Write(p)
}

// receiver is an audit webhook: it keeps the EventLists POSTed to it, decoded strictly, and their bodies.
type receiver struct {
	mu     sync.Mutex
	lists  []auditv1.EventList
	bodies [][]byte
	auth   []string
	failed []error
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var list auditv1.EventList
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		err = dec.Decode(&list)
	}
	if err == nil && (list.APIVersion != "audit.k8s.io/v1" || list.Kind != "EventList") {
		err = fmt.Errorf("got %s %s, want audit.k8s.io/v1 EventList", list.APIVersion, list.Kind)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.failed = append(r.failed, err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.lists = append(r.lists, list)
	r.bodies = append(r.bodies, body)
	r.auth = append(r.auth, req.Header.Get("Authorization"))
	w.WriteHeader(http.StatusOK)
}

// events are every event received, in order.
func (r *receiver) events() []auditv1.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []auditv1.Event
	for _, l := range r.lists {
		out = append(out, l.Items...)
	}
	return out
}

func (r *receiver) ids() []string {
	var ids []string
	for _, ev := range r.events() {
		ids = append(ids, string(ev.AuditID))
	}
	return ids
}

func (r *receiver) errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.failed)
}

// serveTLS serves r with cert on ln (127.0.0.1) until the test ends.
func serveTLS(t *testing.T, ln net.Listener, cert tls.Certificate, r http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(r)
	_ = srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// loopbackCert is a self-signed serving certificate for 127.0.0.1, and its PEM, the webhook's CA.
func loopbackCert(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "audit-webhook"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// webhookCredential is the token of the webhook's kubeconfig: it goes to the webhook and nowhere else.
const webhookCredential = "webhook-credential-0123"

// writeKubeconfig names https://addr as the audit webhook, with caPEM and webhookCredential.
func writeKubeconfig(t *testing.T, addr string, caPEM []byte) string {
	t.Helper()
	return writeFile(t, "webhook.kubeconfig", fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: audit
  cluster:
    server: https://%s
    certificate-authority-data: %s
users:
- name: audit
  user:
    token: %s
contexts:
- name: audit
  context:
    cluster: audit
    user: audit
current-context: audit
`, addr, base64.StdEncoding.EncodeToString(caPEM), webhookCredential))
}

// freeLoopbackAddr is an address on 127.0.0.1 nothing listens on now, which a test may listen on later.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// quickBatch makes a webhook's batches go out within milliseconds.
func quickBatch() *buffered.BatchConfig {
	return &buffered.BatchConfig{BufferSize: 100, MaxBatchSize: 10, MaxBatchWait: 5 * time.Millisecond, AsyncDelegate: true}
}
