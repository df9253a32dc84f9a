package system

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Squid is a forward proxy on 127.0.0.1 with its own hosts file, standing in for a corporate proxy that resolves
// the hub's public name. It allows CONNECT from loopback only.
type Squid struct {
	dir  string
	port int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartSquid writes a private configuration under dir and starts squid in the foreground.
func StartSquid(dir string, hosts map[string]string) (*Squid, error) {
	if _, err := exec.LookPath("squid"); err != nil {
		if _, statErr := os.Stat("/usr/sbin/squid"); statErr != nil {
			return nil, fmt.Errorf("squid is needed as the forward proxy: apt-get install -y squid-openssl")
		}
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
	s := &Squid{dir: dir, port: freePort()}
	conf := strings.Join([]string{
		fmt.Sprintf("http_port 127.0.0.1:%d", s.port),
		"hosts_file " + filepath.Join(dir, "hosts"),
		"acl loopback src 127.0.0.0/8",
		"acl CONNECT method CONNECT",
		"http_access allow loopback",
		"http_access deny all",
		"cache deny all",
		"pid_filename " + filepath.Join(dir, "squid.pid"),
		"cache_log stdio:" + filepath.Join(dir, "cache.log"),
		"access_log stdio:" + filepath.Join(dir, "access.log"),
		"logfile_rotate 0",
		"coredump_dir " + dir,
		"shutdown_lifetime 0 seconds",
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "squid.conf"), []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the proxy's address for HTTPS_PROXY and a kubeconfig's proxy-url.
func (s *Squid) URL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.port) }

// AccessLog is where squid writes a line for each tunnel it closed.
func (s *Squid) AccessLog() string { return filepath.Join(s.dir, "access.log") }

// Start runs squid (again, after Stop) on the same port and waits until it listens.
func (s *Squid) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logFile, err := os.OpenFile(filepath.Join(s.dir, "squid.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	bin := "squid"
	if _, err := exec.LookPath(bin); err != nil {
		bin = "/usr/sbin/squid"
	}
	cmd := exec.Command(bin, "-N", "-f", filepath.Join(s.dir, "squid.conf"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start squid: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			raw, _ := os.ReadFile(filepath.Join(s.dir, "cache.log"))
			return fmt.Errorf("squid exited at start: %s", lastLines(string(raw), 10))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("squid does not listen on %s: %w", s.URL(), err)
		}
		time.Sleep(100 * time.Millisecond) // waiting for a foreign process to bind; it offers nothing to watch
	}
}

// Stop ends squid gracefully (it logs the tunnels it closes).
func (s *Squid) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
