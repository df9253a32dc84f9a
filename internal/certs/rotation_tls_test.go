package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// handshakeTimeout bounds every network operation so a broken handshake
// fails the test instead of hanging it.
const handshakeTimeout = 5 * time.Second

// peer is one side of an mTLS connection as a controller would configure it
// from Secrets: tls.crt (leaf plus intermediates), tls.key and the CA bundle
// it trusts for the other side.
type peer struct {
	chain  []byte
	key    []byte
	bundle []byte
	// ignoreAcceptableCAs makes a client send its certificate even when the
	// server's certificate_authorities hint does not match it, as some
	// non-Go clients do, so that the server's chain verification is what
	// rejects it.
	ignoreAcceptableCAs bool
}

// TestRotationOverlapTLS walks a staged CA rollover A -> B and runs real
// mutual-TLS handshakes for every pairing of bundles and leaves that can
// coexist while the rollout is in progress:
//
//	stage 1: bundles go from {A} to {A,B}; leaves are still issued by A
//	stage 2: leaves are reissued by B and served with X = CrossSign(B, A)
//	stage 3: bundles shrink to {B}
//
// Negative controls prove that verification is really happening.
func TestRotationOverlapTLS(t *testing.T) {
	// crypto/tls verifies against tls.Config.Time, so the whole scenario runs
	// on a fake clock and the package stays clock-free.
	fakeNow := time.Date(2031, time.June, 1, 12, 0, 0, 0, time.UTC)
	handshakeAt := fakeNow.Add(time.Hour)

	caA := mustCA(t, "proxy-ca", 365*day, fakeNow.Add(-250*day))
	NewWithT(t).Expect(CANeedsRotation(caA.Cert, fakeNow)).To(BeTrue(), "scenario starts when A is due for rotation")
	caB := mustCA(t, "proxy-ca", 365*day, fakeNow)
	// Same CN as the real CAs: trust must not follow from the name.
	unrelated := mustCA(t, "proxy-ca", 365*day, fakeNow)
	_, crossPEM, err := CrossSign(caB, caA, fakeNow)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())

	serverSpec := LeafSpec{CommonName: "proxy-server", DNSNames: []string{"localhost"}, Usages: []Usage{UsageServerAuth}, Duration: 30 * day}
	clientSpec := LeafSpec{CommonName: "proxy-agent", Usages: []Usage{UsageClientAuth}, Duration: 30 * day}
	sA := mustLeaf(t, caA, serverSpec, fakeNow.Add(-10*day))
	cA := mustLeaf(t, caA, clientSpec, fakeNow.Add(-10*day))
	sB := mustLeaf(t, caB, serverSpec, fakeNow)
	cB := mustLeaf(t, caB, clientSpec, fakeNow)
	sU := mustLeaf(t, unrelated, serverSpec, fakeNow)
	cU := mustLeaf(t, unrelated, clientSpec, fakeNow)

	oldBundle := EncodeBundle(caA.Cert)
	overlap := EncodeBundle(caA.Cert, caB.Cert)
	newBundle := EncodeBundle(caB.Cert)

	oldLeaf := func(kp *KeyPair, bundle []byte) peer { return peer{chain: kp.CertPEM, key: kp.KeyPEM, bundle: bundle} }
	newLeaf := func(kp *KeyPair, bundle []byte) peer {
		return peer{chain: concat(kp.CertPEM, crossPEM), key: kp.KeyPEM, bundle: bundle}
	}
	forced := func(p peer) peer { p.ignoreAcceptableCAs = true; return p }

	tests := []struct {
		name           string
		server, client peer
		// wantErr is empty when the handshake must succeed; otherwise a
		// regexp the joined client/server error must match, which pins
		// down the side that rejected and why.
		wantErr string
	}{
		{name: "before rotation: old leaves, old bundles",
			server: oldLeaf(sA, oldBundle), client: oldLeaf(cA, oldBundle)},

		// Stage 1: overlap bundles roll out, leaves unchanged.
		{name: "stage 1: client has overlap bundle, server old bundle",
			server: oldLeaf(sA, oldBundle), client: oldLeaf(cA, overlap)},
		{name: "stage 1: server has overlap bundle, client old bundle",
			server: oldLeaf(sA, overlap), client: oldLeaf(cA, oldBundle)},
		{name: "stage 1: overlap bundles, old leaves",
			server: oldLeaf(sA, overlap), client: oldLeaf(cA, overlap)},

		// Stage 2: leaves reissued by B with the cross-signed intermediate.
		{name: "stage 2: client with old bundle vs new server leaf",
			server: newLeaf(sB, overlap), client: oldLeaf(cA, oldBundle)},
		{name: "stage 2: server with old bundle vs new client leaf",
			server: oldLeaf(sA, oldBundle), client: newLeaf(cB, overlap)},
		{name: "stage 2: old bundles on both sides, new leaves on both sides",
			server: newLeaf(sB, oldBundle), client: newLeaf(cB, oldBundle)},
		{name: "stage 2: overlap client bundle vs old server leaf, new client leaf",
			server: oldLeaf(sA, overlap), client: newLeaf(cB, overlap)},
		{name: "stage 2: overlap client bundle vs new server leaf, old client leaf",
			server: newLeaf(sB, overlap), client: oldLeaf(cA, overlap)},
		{name: "stage 2: overlap bundles, new leaves",
			server: newLeaf(sB, overlap), client: newLeaf(cB, overlap)},

		// Stage 3: bundles shrink to B once every leaf is issued by B.
		{name: "stage 3: client with new bundle vs new server leaf",
			server: newLeaf(sB, overlap), client: newLeaf(cB, newBundle)},
		{name: "stage 3: server with new bundle vs new client leaf",
			server: newLeaf(sB, newBundle), client: newLeaf(cB, overlap)},
		{name: "stage 3: new bundles, new leaves",
			server: newLeaf(sB, newBundle), client: newLeaf(cB, newBundle)},

		// Negative controls.
		{name: "FAIL: client with new bundle vs old server leaf (old CA gone)",
			server: oldLeaf(sA, overlap), client: newLeaf(cB, newBundle),
			wantErr: `client: handshake: .*certificate signed by unknown authority`},
		{name: "FAIL: server with new bundle vs old client leaf",
			server: newLeaf(sB, newBundle), client: oldLeaf(cA, overlap),
			wantErr: `server: handshake: tls: client didn't provide a certificate`},
		{name: "FAIL: server with new bundle vs old client leaf sent anyway",
			server: newLeaf(sB, newBundle), client: forced(oldLeaf(cA, overlap)),
			wantErr: `server: handshake: .*certificate signed by unknown authority`},
		{name: "FAIL: new server leaf without the cross-signed intermediate vs old client bundle",
			server: oldLeaf(sB, overlap), client: oldLeaf(cA, oldBundle),
			wantErr: `client: handshake: .*certificate signed by unknown authority`},
		{name: "FAIL: new client leaf without the cross-signed intermediate vs old server bundle",
			server: oldLeaf(sA, oldBundle), client: forced(oldLeaf(cB, overlap)),
			wantErr: `server: handshake: .*certificate signed by unknown authority`},
		{name: "FAIL: server leaf from an unrelated CA",
			server: oldLeaf(sU, overlap), client: newLeaf(cB, overlap),
			wantErr: `client: handshake: .*certificate signed by unknown authority`},
		{name: "FAIL: client leaf from an unrelated CA",
			server: newLeaf(sB, overlap), client: forced(oldLeaf(cU, overlap)),
			wantErr: `server: handshake: .*certificate signed by unknown authority`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := mtlsHandshake(tt.server, tt.client, handshakeAt)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(MatchRegexp(tt.wantErr)))
		})
	}
}

// TestRotationHandshakeHonoursFakeClock guards the helper itself: if
// tls.Config.Time were ignored, certificates dated in 2031 could not verify
// today and every positive row above would fail for the wrong reason; and a
// handshake after the leaves expired must fail.
func TestRotationHandshakeHonoursFakeClock(t *testing.T) {
	g := NewWithT(t)
	fakeNow := time.Date(2031, time.June, 1, 12, 0, 0, 0, time.UTC)
	ca := mustCA(t, "proxy-ca", 365*day, fakeNow)
	s := mustLeaf(t, ca, LeafSpec{CommonName: "s", DNSNames: []string{"localhost"}, Duration: day}, fakeNow)
	c := mustLeaf(t, ca, LeafSpec{CommonName: "c", Duration: day}, fakeNow)
	server := peer{chain: s.CertPEM, key: s.KeyPEM, bundle: ca.CertPEM}
	client := peer{chain: c.CertPEM, key: c.KeyPEM, bundle: ca.CertPEM}

	g.Expect(mtlsHandshake(server, client, fakeNow)).To(Succeed())
	g.Expect(mtlsHandshake(server, client, fakeNow.Add(2*day))).To(MatchError(ContainSubstring("expired")))
}

// mtlsHandshake runs one mutual-TLS handshake over loopback TCP and returns
// nil only if both sides completed it and the client received data the
// server wrote afterwards. Both sides' errors are reported, prefixed with
// "client: " / "server: ", because with TLS 1.3 the client finishes its
// handshake before the server has checked the client certificate.
func mtlsHandshake(server, client peer, at time.Time) error {
	serverCfg, err := serverConfig(server, at)
	if err != nil {
		return err
	}
	clientCfg, err := clientConfig(client, at)
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()

	serverErr := make(chan error, 1)
	go func() { serverErr <- serveOnce(ln) }()
	clientErr := dialOnce(ln.Addr().String(), clientCfg)
	// Unblocks Accept if the client never connected.
	_ = ln.Close()
	return errors.Join(prefixErr("client", clientErr), prefixErr("server", <-serverErr))
}

func serverConfig(p peer, at time.Time) (*tls.Config, error) {
	cert, pool, err := loadPeer(p)
	if err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		Time:         func() time.Time { return at },
		MinVersion:   tls.VersionTLS12,
	}, nil
}

func clientConfig(p peer, at time.Time) (*tls.Config, error) {
	cert, pool, err := loadPeer(p)
	if err != nil {
		return nil, fmt.Errorf("client config: %w", err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		ServerName:   "localhost",
		Time:         func() time.Time { return at },
		MinVersion:   tls.VersionTLS12,
	}
	if p.ignoreAcceptableCAs {
		cfg.Certificates = nil
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	}
	return cfg, nil
}

// loadPeer goes through the same PEM the operator would store in Secrets.
func loadPeer(p peer) (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.X509KeyPair(p.chain, p.key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("key pair: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(p.bundle) {
		return tls.Certificate{}, nil, errors.New("CA bundle holds no certificate")
	}
	return cert, pool, nil
}

func serveOnce(ln net.Listener) error {
	conn, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer conn.Close()
	tlsConn, ok := conn.(*tls.Conn)
	if !ok {
		return fmt.Errorf("accepted %T, want *tls.Conn", conn)
	}
	if err := tlsConn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return fmt.Errorf("set deadline: %w", err)
	}
	if err := tlsConn.Handshake(); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if _, err := tlsConn.Write([]byte("ok")); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

func dialOnce(addr string, cfg *tls.Config) error {
	dialer := &net.Dialer{Timeout: handshakeTimeout, Deadline: time.Now().Add(handshakeTimeout)}
	conn, err := tls.DialWithDialer(dialer, "tcp", addr, cfg)
	if err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return fmt.Errorf("set deadline: %w", err)
	}
	// Reading the server's message surfaces a rejection of our certificate,
	// which TLS 1.3 only reports after the client's handshake returned.
	buf := make([]byte, 2)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return fmt.Errorf("read from server: %w", err)
	}
	return nil
}

func prefixErr(side string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", side, err)
}
