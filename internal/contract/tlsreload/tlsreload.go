// Package tlsreload keeps a certificate, its key and a CA bundle in step with their files on disk. The tls.Configs it
// hands out look the current material up on every handshake, so renewed files take effect for new connections while
// established connections (and the tunnels over them) stay up.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Source is a certificate/key pair and a CA bundle read from files. Either part may be absent (empty file names).
type Source struct {
	certFile, keyFile, caFile string

	mu      sync.RWMutex
	cur     *Material
	changes atomic.Uint64
	profile *Profile
}

// WithProfile makes the server configs of s follow profile (minimum version, cipher suites) on every handshake.
func (s *Source) WithProfile(profile *Profile) *Source {
	s.profile = profile
	return s
}

// PEM is a certificate, its key and a CA bundle as read. A part whose name is empty is absent; the names say where
// the parts came from in errors.
type PEM struct {
	Cert, Key, CA    []byte
	PairName, CAName string
}

// Material is PEM parsed, kept with the bytes it came from so that the same content read again is not parsed again.
type Material struct {
	// Cert is the certificate and key, nil without a pair.
	Cert *tls.Certificate
	// Pool is the CA bundle, nil without one.
	Pool *x509.CertPool
	in   PEM
}

// Parse parses in, or returns prev when in is what prev was parsed from. changed says which; on error prev stays the
// material to use.
func Parse(prev *Material, in PEM) (m *Material, changed bool, err error) {
	if prev != nil && prev.in.PairName == in.PairName && prev.in.CAName == in.CAName &&
		bytes.Equal(prev.in.Cert, in.Cert) && bytes.Equal(prev.in.Key, in.Key) && bytes.Equal(prev.in.CA, in.CA) {
		return prev, false, nil
	}
	m = &Material{in: in}
	if in.PairName != "" {
		pair, err := tls.X509KeyPair(in.Cert, in.Key)
		if err != nil {
			return nil, false, fmt.Errorf("key pair %s: %w", in.PairName, err)
		}
		m.Cert = &pair
	}
	if in.CAName != "" {
		m.Pool = x509.NewCertPool()
		if !m.Pool.AppendCertsFromPEM(in.CA) {
			return nil, false, fmt.Errorf("no PEM certificate in CA bundle %s", in.CAName)
		}
	}
	return m, true, nil
}

// New reads the files once; it fails when they are missing or do not parse, so a process does not start without its
// credentials.
func New(certFile, keyFile, caFile string) (*Source, error) {
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("tlsreload: a certificate needs its key and a key its certificate")
	}
	s := &Source{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if _, err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files and swaps in their content if it changed and parses. On error the previous material stays
// in use; a certificate and key caught halfway through an update simply fail to match and are read again later.
func (s *Source) Reload() (changed bool, err error) {
	in := PEM{CAName: s.caFile}
	if s.certFile != "" {
		in.PairName = s.certFile + ", " + s.keyFile
	}
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{s.certFile, &in.Cert}, {s.keyFile, &in.Key}, {s.caFile, &in.CA}} {
		if f.name == "" {
			continue
		}
		if *f.dst, err = os.ReadFile(f.name); err != nil {
			return false, fmt.Errorf("tlsreload: %w", err)
		}
	}
	s.mu.RLock()
	prev := s.cur
	s.mu.RUnlock()
	next, changed, err := Parse(prev, in)
	if err != nil {
		return false, fmt.Errorf("tlsreload: %w", err)
	}
	if !changed {
		return false, nil
	}
	s.mu.Lock()
	s.cur = next
	s.mu.Unlock()
	s.changes.Add(1)
	return true, nil
}

// Run reloads every interval until ctx ends. Secret volumes are updated by swapping a symlink, which file
// notifications report unreliably; polling a few small files is cheap and always right.
func (s *Source) Run(ctx context.Context, interval time.Duration, log logr.Logger) {
	poll(ctx, interval, s.Reload, func() {
		log.Info("Reloaded certificates", "cert", s.certFile, "ca", s.caFile)
	}, func(err error) { log.Error(err, "Keeping the previous certificates") })
}

// poll calls reload every interval until ctx ends, and reports a change with changed; a failure is reported with
// failed once, not again while the same failure lasts.
func poll(ctx context.Context, interval time.Duration, reload func() (bool, error), changed func(), failed func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	reported := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ok, err := reload()
			if err != nil {
				if err.Error() != reported {
					failed(err)
					reported = err.Error()
				}
				continue
			}
			reported = ""
			if ok {
				changed()
			}
		}
	}
}

// Loads counts the successful loads, the first included.
func (s *Source) Loads() uint64 { return s.changes.Load() }

// Certificate is the current certificate and key, nil without one.
func (s *Source) Certificate() *tls.Certificate {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur.Cert
}

// CAPool is the current CA bundle, nil without one.
func (s *Source) CAPool() *x509.CertPool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cur.Pool
}

// ServerConfig serves the current certificate and, when the source has a CA bundle, requires and verifies client
// certificates against it.
func (s *Source) ServerConfig() *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := base.Clone()
		c.GetConfigForClient = nil
		if s.profile != nil {
			s.profile.apply(c)
		}
		c.Certificates = []tls.Certificate{*s.Certificate()}
		if pool := s.CAPool(); pool != nil {
			c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, pool
		}
		return c, nil
	}
	return base
}

// ClientConfig presents the current certificate (if any) and verifies the server against the current CA bundle.
// serverName, when set, is the name the server's certificate must carry; otherwise the dialed host name is used.
func (s *Source) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: serverName,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if c := s.Certificate(); c != nil {
				return c, nil
			}
			return &tls.Certificate{}, nil
		},
		// The standard verification reads a fixed RootCAs; this one reads the pool at handshake time.
		InsecureSkipVerify: true, //nolint:gosec // verified below against the current pool
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verify(cs, serverName)
		},
	}
}

func (s *Source) verify(cs tls.ConnectionState, serverName string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tlsreload: the server sent no certificate")
	}
	if serverName == "" {
		serverName = cs.ServerName
	}
	opts := x509.VerifyOptions{Roots: s.CAPool(), DNSName: serverName, Intermediates: x509.NewCertPool()}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}
