// Package squid runs the real squid as a forward proxy for the local system and the tests: a private configuration,
// a hosts file of its own, a plain-HTTP port and a TLS port with a throw-away CA, and its access log read back.
package squid

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/ports"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// squidCAValidity is the lifetime of the throw-away CA of a Squid's TLS port, and of its serving certificate: longer
// than any 'make run' session.
const squidCAValidity = 365 * 24 * time.Hour

// squidLogFormat is squid's native access log format followed by the local address the client connected to, so a
// line tells which of the proxy's ports (URL or TLSURL) carried the request.
const squidLogFormat = "%ts.%03tu %6tr %>a %Ss/%03>Hs %<st %rm %ru %[un %Sh/%<a %mt %>la:%>lp"

// Squid is a forward proxy with its own hosts file, standing in for a corporate proxy that resolves the hub's public
// name. It listens on two ports of one address, plain HTTP (URL) and TLS (TLSURL, serving a certificate of its own
// throw-away CA), and allows CONNECT only from the networks it is told.
type Squid struct {
	dir     string
	ip      net.IP
	port    int
	tlsPort int
	caPEM   []byte
	ca      *certs.KeyPair

	mu   sync.Mutex
	proc *process.Process
}

// Options of Start.
type Options struct {
	// Listen is the address of both ports; default 127.0.0.1. Ports are free ones unless set.
	Listen        net.IP
	Port, TLSPort int
	// Hosts are name → address entries squid resolves (its hosts_file).
	Hosts map[string]string
	// AllowFrom are the networks (CIDR) whose clients may use the proxy; default loopback only.
	AllowFrom []string
}

// Start writes a private configuration under dir and starts squid in the foreground.
func Start(dir string, opts Options) (*Squid, error) {
	hosts := opts.Hosts
	if opts.Listen == nil {
		opts.Listen = net.IPv4(127, 0, 0, 1)
	}
	if len(opts.AllowFrom) == 0 {
		opts.AllowFrom = []string{"127.0.0.0/8"}
	}
	if _, err := squidBinary(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	// squid drops root privileges to its own user, which must read its files and write its logs.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, err
	}
	for d := filepath.Dir(dir); d != "/" && d != "."; d = filepath.Dir(d) {
		if info, err := os.Stat(d); err == nil && info.Mode().Perm()&0o005 != 0o005 {
			_ = os.Chmod(d, info.Mode().Perm()|0o005)
		}
	}
	var hostLines []string
	for name, ip := range hosts {
		hostLines = append(hostLines, ip+" "+name)
	}
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(strings.Join(hostLines, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	ca, err := certs.NewCA("local-forward-proxy-ca", squidCAValidity, time.Now())
	if err != nil {
		return nil, fmt.Errorf("squid CA: %w", err)
	}
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: "local-forward-proxy", DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{opts.Listen}, Usages: []certs.Usage{certs.UsageServerAuth}, Duration: squidCAValidity}, time.Now())
	if err != nil {
		return nil, fmt.Errorf("squid serving certificate: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, data := range map[string][]byte{certFile: leaf.CertPEM, filepath.Join(dir, "ca.crt"): ca.CertPEM} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return nil, err
		}
	}
	// A throw-away key of a loopback-only proxy, which squid reads after dropping root privileges to its own user.
	if err := os.WriteFile(keyFile, leaf.KeyPEM, 0o644); err != nil { //nolint:gosec // squid's user must read it
		return nil, err
	}
	s := &Squid{dir: dir, ip: opts.Listen, port: opts.Port, tlsPort: opts.TLSPort, caPEM: ca.CertPEM, ca: ca}
	if s.port == 0 {
		s.port = ports.Free()
	}
	if s.tlsPort == 0 {
		s.tlsPort = ports.Free()
	}
	conf := strings.Join([]string{
		fmt.Sprintf("http_port %s", s.address(s.port)),
		fmt.Sprintf("https_port %s tls-cert=%s tls-key=%s", s.address(s.tlsPort), certFile, keyFile),
		"hosts_file " + filepath.Join(dir, "hosts"),
		"acl clients src " + strings.Join(opts.AllowFrom, " "),
		"acl CONNECT method CONNECT",
		"http_access allow clients",
		"http_access deny all",
		"cache deny all",
		"pid_filename " + filepath.Join(dir, "squid.pid"),
		"cache_log stdio:" + filepath.Join(dir, "cache.log"),
		"logformat local_port " + squidLogFormat,
		"access_log stdio:" + filepath.Join(dir, "access.log") + " local_port",
		"logfile_rotate 0",
		"coredump_dir " + dir,
		"shutdown_lifetime 0 seconds",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "squid.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		_ = s.Stop() // a squid that started but never listened
		return nil, err
	}
	return s, nil
}

// URL is the proxy's plain-HTTP address for HTTPS_PROXY and a kubeconfig's proxy-url.
func (s *Squid) URL() string { return "http://" + s.address(s.port) }

// TLSURL is the proxy's address over TLS for HTTPS_PROXY and a kubeconfig's proxy-url: clients must trust CA.
func (s *Squid) TLSURL() string { return "https://" + s.address(s.tlsPort) }

func (s *Squid) address(port int) string { return net.JoinHostPort(s.ip.String(), strconv.Itoa(port)) }

// CA is the PEM of the CA that issued the certificate TLSURL serves, for an AddOnDeploymentConfig's
// proxyConfig.caBundle and a kubeconfig's certificate-authority-data.
func (s *Squid) CA() []byte { return append([]byte(nil), s.caPEM...) }

// CAPair is the proxy's CA with its key: what whoever runs the proxy holds. The end-to-end suite signs with it what
// such an attacker would sign.
func (s *Squid) CAPair() *certs.KeyPair { return s.ca }

// CAFile is the same PEM as CA, as a file (for curl --proxy-cacert).
func (s *Squid) CAFile() string { return filepath.Join(s.dir, "ca.crt") }

// AccessLog is where squid writes a line for each tunnel it closed: squid's native format followed by the local
// address the client connected to (see Tunnels).
func (s *Squid) AccessLog() string { return filepath.Join(s.dir, "access.log") }

// Tunnel is a CONNECT squid carried.
type Tunnel struct {
	// Target is the host:port the client asked for.
	Target string
	// TLS tells whether the client came to the TLS port (TLSURL) rather than the plain-HTTP one (URL).
	TLS bool
}

// Tunnels are the CONNECTs of the access log, in its order. Squid logs a tunnel when it closes, so one still open is
// not there yet; Stop closes them all.
func (s *Squid) Tunnels() ([]Tunnel, error) {
	raw, err := os.ReadFile(s.AccessLog())
	if err != nil {
		return nil, fmt.Errorf("read squid's access log: %w", err)
	}
	tlsAddr := s.address(s.tlsPort)
	var tunnels []Tunnel
	for _, line := range strings.Split(string(raw), "\n") {
		// time elapsed client code/status bytes method URL user hierarchy/peer type local-address
		f := strings.Fields(line)
		if len(f) < 11 || f[5] != "CONNECT" {
			continue
		}
		tunnels = append(tunnels, Tunnel{Target: f[6], TLS: f[len(f)-1] == tlsAddr})
	}
	return tunnels, nil
}

// squidBinary is squid on PATH, else in /usr/sbin (not on a non-root user's PATH).
func squidBinary() (string, error) {
	if bin, err := exec.LookPath("squid"); err == nil {
		return bin, nil
	}
	if _, err := os.Stat("/usr/sbin/squid"); err != nil {
		return "", fmt.Errorf("squid is needed as the forward proxy: apt-get install -y squid-openssl")
	}
	return "/usr/sbin/squid", nil
}

// Start runs squid (again, after Stop) on the same ports and waits until it listens on both.
func (s *Squid) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	bin, err := squidBinary()
	if err != nil {
		return err
	}
	p, err := process.Run(process.Command{Path: bin, Args: []string{"-N", "-f", filepath.Join(s.dir, "squid.conf")},
		LogPath: filepath.Join(s.dir, "squid.out"), AppendLog: true})
	if err != nil {
		return fmt.Errorf("squid: %w", err)
	}
	s.proc = p
	deadline := time.Now().Add(30 * time.Second)
	for _, port := range []int{s.port, s.tlsPort} {
		address := s.address(port)
		for {
			c, err := net.DialTimeout("tcp", address, time.Second)
			if err == nil {
				c.Close()
				break
			}
			select {
			case <-p.Done():
				lines, _ := process.TailLines(filepath.Join(s.dir, "cache.log"), 10)
				return fmt.Errorf("squid exited at start: %s", strings.Join(lines, "\n"))
			default:
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("squid does not listen on %s: %w", address, err)
			}
			time.Sleep(100 * time.Millisecond) // waiting for a foreign process to bind; it offers nothing to watch
		}
	}
	return nil
}

// Stop ends squid gracefully (it logs the tunnels it closes).
func (s *Squid) Stop() error {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.Terminate(15 * time.Second)
	}
	return nil
}
