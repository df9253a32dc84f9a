package tlsbatch

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
)

// An HTTP/1 handler batches its large writes through ForRequest; an HTTP/2 one gets none, since its connection is
// written by another goroutine.
func TestForRequestGivesTheConnBeneathHTTP1Only(t *testing.T) {
	RegisterTestingT(t)
	serverCfg, clientCfg := tlsConfigs(t)
	body := bytes.Repeat([]byte("0123456789abcdef"), 4*RecordPayload/16)
	batched := make(chan bool, 1)
	srv := &http.Server{
		ConnContext: ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c := ForRequest(r)
			batched <- c != nil
			for b := body; len(b) > 0; b = b[2*RecordPayload:] {
				_, _ = c.Batch(func() (int, error) { return w.Write(b[:2*RecordPayload]) })
			}
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	go func() { _ = srv.Serve(tls.NewListener(Listener(ln), serverCfg)) }()
	t.Cleanup(func() { _ = srv.Close() })

	for _, tc := range []struct {
		proto   string
		batched bool
	}{{"http/1.1", true}, {"h2", false}} {
		cfg := clientCfg.Clone()
		cfg.NextProtos = []string{tc.proto}
		client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: tc.proto == "h2"}}
		resp, err := client.Get("https://" + ln.Addr().String() + "/")
		Expect(err).NotTo(HaveOccurred())
		got, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		Expect(resp.Proto).To(HavePrefix(map[string]string{"http/1.1": "HTTP/1", "h2": "HTTP/2"}[tc.proto]))
		Expect(bytes.Equal(got, body)).To(BeTrue(), "%s: the body arrives whole and in order", tc.proto)
		Expect(<-batched).To(Equal(tc.batched), tc.proto)
	}
}
