package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

type pki struct {
	dir string
	ca  *certs.KeyPair
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca, err := certs.NewCA("test-ca", time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &pki{dir: t.TempDir(), ca: ca}
}

// write issues a leaf for localhost/127.0.0.1 and writes it (and the CA) under prefix; it returns the leaf.
func (p *pki) write(t *testing.T, prefix string, ca *certs.KeyPair) *certs.KeyPair {
	t.Helper()
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: prefix, DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Duration: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{prefix + ".crt": leaf.CertPEM, prefix + ".key": leaf.KeyPEM, "ca.crt": ca.CertPEM} {
		if err := os.WriteFile(filepath.Join(p.dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return leaf
}

func (p *pki) source(t *testing.T, prefix string) *Source {
	t.Helper()
	s, err := New(filepath.Join(p.dir, prefix+".crt"), filepath.Join(p.dir, prefix+".key"), filepath.Join(p.dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve accepts mTLS connections and echoes one line of each; it records the client serial numbers it saw.
func serve(t *testing.T, cfg *tls.Config) (addr string, seen chan string) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	seen = make(chan string, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				tc := conn.(*tls.Conn)
				if err := tc.Handshake(); err != nil {
					return
				}
				seen <- tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
				buf := make([]byte, 64)
				for {
					n, err := conn.Read(buf)
					if err != nil {
						return
					}
					if _, err := conn.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), seen
}

func echo(g Gomega, conn net.Conn, msg string) {
	_, err := conn.Write([]byte(msg))
	g.Expect(err).NotTo(HaveOccurred())
	buf := make([]byte, len(msg))
	_, err = conn.Read(buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf)).To(Equal(msg))
}

func TestRenewedClientCertificateIsUsedByNewConnectionsWhileOldOnesStayUp(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	p.write(t, "server", p.ca)
	first := p.write(t, "client", p.ca)
	addr, seen := serve(t, p.source(t, "server").ServerConfig())
	client := p.source(t, "client")

	old, err := tls.Dial("tcp", addr, client.ClientConfig("localhost"))
	g.Expect(err).NotTo(HaveOccurred())
	defer old.Close()
	echo(g, old, "before")
	g.Expect(<-seen).To(Equal(first.Cert.SerialNumber.String()))

	second := p.write(t, "client", p.ca)
	changed, err := client.Reload()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(client.Loads()).To(Equal(uint64(2)))

	renewed, err := tls.Dial("tcp", addr, client.ClientConfig("localhost"))
	g.Expect(err).NotTo(HaveOccurred())
	defer renewed.Close()
	echo(g, renewed, "after")
	g.Expect(<-seen).To(Equal(second.Cert.SerialNumber.String()), "the new connection presents the renewed certificate")
	echo(g, old, "still up")

	changed, err = client.Reload()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "unchanged files are not a reload")
}

func TestServerTrustsANewCAOnlyAfterReload(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	p.write(t, "server", p.ca)
	server := p.source(t, "server")
	addr, _ := serve(t, server.ServerConfig())

	other, err := certs.NewCA("other-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	leaf, err := certs.IssueLeaf(other, certs.LeafSpec{CommonName: "stranger", Duration: time.Hour}, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "c.crt"), leaf.CertPEM, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "c.key"), leaf.KeyPEM, 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "ca.crt"), p.ca.CertPEM, 0o600)).To(Succeed())
	stranger, err := New(filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"), filepath.Join(dir, "ca.crt"))
	g.Expect(err).NotTo(HaveOccurred())

	refused := func() error {
		conn, err := tls.Dial("tcp", addr, stranger.ClientConfig("localhost"))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Read(make([]byte, 1)) // TLS 1.3 reports a refused client certificate on the first read
		return err
	}
	g.Expect(refused()).To(HaveOccurred(), "a client of an unknown CA is refused")

	bundle := append(append([]byte{}, p.ca.CertPEM...), other.CertPEM...)
	g.Expect(os.WriteFile(filepath.Join(p.dir, "ca.crt"), bundle, 0o600)).To(Succeed())
	_, err = server.Reload()
	g.Expect(err).NotTo(HaveOccurred())
	conn, err := tls.Dial("tcp", addr, stranger.ClientConfig("localhost"))
	g.Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	echo(g, conn, "trusted now")
}

func TestClientVerifiesServerNameAndCA(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	p.write(t, "server", p.ca)
	p.write(t, "client", p.ca)
	addr, _ := serve(t, p.source(t, "server").ServerConfig())
	client := p.source(t, "client")

	_, err := tls.Dial("tcp", addr, client.ClientConfig("not-the-server.example.com"))
	g.Expect(err).To(MatchError(ContainSubstring("not-the-server.example.com")))

	other, err := certs.NewCA("other-ca", time.Hour, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(p.dir, "ca.crt"), other.CertPEM, 0o600)).To(Succeed())
	_, err = client.Reload()
	g.Expect(err).NotTo(HaveOccurred())
	_, err = tls.Dial("tcp", addr, client.ClientConfig("localhost"))
	g.Expect(err).To(HaveOccurred(), "a server of a CA the client no longer trusts is refused")
}

func TestBadFilesKeepThePreviousMaterial(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	leaf := p.write(t, "client", p.ca)
	s := p.source(t, "client")

	g.Expect(os.WriteFile(filepath.Join(p.dir, "client.key"), []byte("not a key"), 0o600)).To(Succeed())
	_, err := s.Reload()
	g.Expect(err).To(MatchError(ContainSubstring("key pair")))
	g.Expect(s.Certificate().Leaf.SerialNumber).To(Equal(leaf.Cert.SerialNumber))

	pool := s.CAPool()
	g.Expect(os.WriteFile(filepath.Join(p.dir, "ca.crt"), []byte("garbage"), 0o600)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(p.dir, "client.key"), leaf.KeyPEM, 0o600)).To(Succeed())
	_, err = s.Reload()
	g.Expect(err).To(MatchError(ContainSubstring("no PEM certificate")))
	g.Expect(s.CAPool()).NotTo(BeNil())
	g.Expect(s.CAPool()).To(BeIdenticalTo(pool), "the CA bundle from before the failed reload stays in use")

	_, err = New(filepath.Join(p.dir, "missing.crt"), filepath.Join(p.dir, "client.key"), "")
	g.Expect(err).To(HaveOccurred(), "a process does not start without its credentials")
	_, err = New(filepath.Join(p.dir, "client.crt"), "", "")
	g.Expect(err).To(HaveOccurred())
}

func TestRunPicksUpChanges(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	p.write(t, "client", p.ca)
	s := p.source(t, "client")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx, 20*time.Millisecond, logr.Discard())
	next := p.write(t, "client", p.ca)
	g.Eventually(func() string { return s.Certificate().Leaf.SerialNumber.String() }, 5*time.Second, 10*time.Millisecond).
		Should(Equal(next.Cert.SerialNumber.String()))
}

func TestParseParsesOnlyChangedContent(t *testing.T) {
	g := NewWithT(t)
	p := newPKI(t)
	leaf := p.write(t, "client", p.ca)
	in := PEM{Cert: leaf.CertPEM, Key: leaf.KeyPEM, CA: p.ca.CertPEM, PairName: "client", CAName: "ca"}

	first, changed, err := Parse(nil, in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(first.Cert.Leaf.SerialNumber).To(Equal(leaf.Cert.SerialNumber))
	g.Expect(first.Pool).NotTo(BeNil())

	again, changed, err := Parse(first, PEM{Cert: bytes.Clone(leaf.CertPEM), Key: bytes.Clone(leaf.KeyPEM),
		CA: bytes.Clone(p.ca.CertPEM), PairName: "client", CAName: "ca"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeFalse(), "the same content read again is not parsed again")
	g.Expect(again).To(BeIdenticalTo(first))

	next := p.write(t, "client", p.ca)
	renewed, changed, err := Parse(first, PEM{Cert: next.CertPEM, Key: next.KeyPEM, CA: p.ca.CertPEM, PairName: "client", CAName: "ca"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(changed).To(BeTrue())
	g.Expect(renewed.Cert.Leaf.SerialNumber).To(Equal(next.Cert.SerialNumber))

	_, _, err = Parse(first, PEM{Cert: next.CertPEM, Key: leaf.KeyPEM, CA: p.ca.CertPEM, PairName: "client", CAName: "ca"})
	g.Expect(err).To(MatchError(ContainSubstring("key pair client")))
	_, _, err = Parse(first, PEM{Cert: next.CertPEM, Key: next.KeyPEM, CA: []byte("garbage"), PairName: "client", CAName: "ca"})
	g.Expect(err).To(MatchError(ContainSubstring("no PEM certificate in CA bundle ca")))

	caOnly, _, err := Parse(nil, PEM{CA: p.ca.CertPEM, CAName: "ca"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(caOnly.Cert).To(BeNil(), "no pair without its name")
}

// TestPollReportsAFailureOnceWhileItLasts: a file that stays broken is reported once, not on every reload; a new
// failure, after a good read or a different one, is reported again, and a change is reported each time.
func TestPollReportsAFailureOnceWhileItLasts(t *testing.T) {
	broken, other := errors.New("broken"), errors.New("other")
	steps := []struct {
		changed bool
		err     error
	}{{err: broken}, {err: broken}, {err: broken}, {err: other}, {changed: true}, {err: broken}, {changed: true}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	reload := func() (bool, error) {
		if calls == len(steps) {
			cancel()
			return false, nil
		}
		calls++
		return steps[calls-1].changed, steps[calls-1].err
	}
	var changes int
	var failures []string
	poll(ctx, time.Millisecond, reload, func() { changes++ }, func(err error) { failures = append(failures, err.Error()) })
	if got := strings.Join(failures, ","); got != "broken,other,broken" || changes != 2 {
		t.Fatalf("failures %q, changes %d; want broken,other,broken and 2", got, changes)
	}
}
