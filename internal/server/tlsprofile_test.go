package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
)

var netDialer = net.Dialer{Timeout: 5 * time.Second}

// TestTLSProfileAppliesToNewHandshakesAndKeepsOpenConnections: every TLS listener refuses a TLS 1.2 client while
// the profile asks for 1.3; a new profile applies to the next handshakes without a restart, a connection made before
// it stays usable, and a malformed profile leaves the last good one in force.
func TestTLSProfileAppliesToNewHandshakesAndKeepsOpenConnections(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile.json")
	// As kubelet updates a ConfigMap volume: a whole new file renamed over the old, so that a reload never reads one
	// half-written (truncated and still empty, which is the default profile).
	write := func(content string) {
		next := filepath.Join(dir, "profile.json.next")
		g.Expect(os.WriteFile(next, []byte(content), 0o600)).To(Succeed())
		g.Expect(os.Rename(next, profile)).To(Succeed())
	}
	write(`{"minTLSVersion":"VersionTLS13"}`)
	f := startFixture(t, false, nil, func(o *Options) { o.TLSProfileFile = profile })
	g.Expect(profileInfo(t)).To(Equal(map[string]string{"min_version": "VersionTLS13", "cipher_suites": ""}))
	handshake := func(addr string, base *tls.Config, maxVersion uint16, suites ...uint16) error {
		cfg := base.Clone()
		cfg.MaxVersion, cfg.CipherSuites = maxVersion, suites
		conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer conn.Close()
		return conn.Handshake()
	}
	agentTLS := f.agentTL("c1", "ns")
	listeners := map[string]*tls.Config{f.addrs.HTTPConnect: f.proxyTL, f.addrs.Frontend: f.proxyTL, f.addrs.Agent: agentTLS}
	for addr, cfg := range listeners {
		g.Expect(handshake(addr, cfg, tls.VersionTLS12)).To(MatchError(ContainSubstring("protocol version")), "TLS 1.2 to %s", addr)
		g.Expect(handshake(addr, cfg, tls.VersionTLS13)).To(Succeed(), "TLS 1.3 to %s", addr)
	}

	open, err := tls.DialWithDialer(&netDialer, "tcp", f.addrs.HTTPConnect, f.proxyTL)
	g.Expect(err).NotTo(HaveOccurred())
	defer open.Close()
	g.Expect(open.ConnectionState().Version).To(Equal(uint16(tls.VersionTLS13)))

	write(`{"minTLSVersion":"VersionTLS12","cipherSuites":["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"]}`)
	for addr, cfg := range listeners {
		g.Eventually(func() error {
			return handshake(addr, cfg, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
		},
			10*time.Second, 20*time.Millisecond).Should(Succeed(), "TLS 1.2 to %s once the profile allows it", addr)
		g.Expect(handshake(addr, cfg, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)).To(HaveOccurred(),
			"a cipher suite the profile leaves out, to %s", addr)
	}

	g.Expect(profileInfo(t)).To(Equal(map[string]string{"min_version": "VersionTLS12", "cipher_suites": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}),
		"the metric reports the profile in force")

	// The connection made under the old profile still carries requests.
	_, err = fmt.Fprintf(open, "CONNECT unknown-cluster:443 HTTP/1.1\r\nHost: unknown-cluster:443\r\n\r\n")
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.ReadResponse(bufio.NewReader(open), &http.Request{Method: http.MethodConnect})
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(BeNumerically(">=", 400), "an answer, on the old connection")

	// A malformed profile keeps the last good one.
	write(`{"minTLSVersion":"VersionTLS13","cipherSuites":["TLS_NO_SUCH_SUITE"]}`)
	g.Consistently(func() error {
		return handshake(f.addrs.HTTPConnect, f.proxyTL, tls.VersionTLS12, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384)
	}, 300*time.Millisecond, 50*time.Millisecond).Should(Succeed())
	g.Expect(profileInfo(t)).To(HaveKeyWithValue("min_version", "VersionTLS12"))
}

// profileInfo is the labels of cluster_proxy_tls_profile_info, which has one series.
func profileInfo(t *testing.T) map[string]string {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "cluster_proxy_tls_profile_info" {
			continue
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%d series of cluster_proxy_tls_profile_info", len(mf.GetMetric()))
		}
		labels := map[string]string{}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		return labels
	}
	t.Fatal("no cluster_proxy_tls_profile_info")
	return nil
}
