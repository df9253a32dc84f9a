//go:build integration

package integration

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/gomega"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/ports"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// process is a program under test (or a forward proxy) started with fixed arguments; it can be killed and started
// again with the same command line, as a pod restart would.
type process struct {
	name string
	bin  string
	args []string
	env  []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func newProcess(name, bin string, args ...string) *process {
	return &process{name: name, bin: bin, args: args, log: filepath.Join(workDir, name+".log")}
}

func (p *process) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	logFile, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	Expect(err).NotTo(HaveOccurred())
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	Expect(cmd.Start()).To(Succeed(), "start %s", p.name)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
}

// stop ends the process with SIGTERM (graceful), or SIGKILL when kill is true, and waits for it.
func (p *process) stop(kill bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// logContains reports whether the process log has a line containing s.
func (p *process) logContains(s string) bool {
	raw, err := os.ReadFile(p.log)
	return err == nil && strings.Contains(string(raw), s)
}

func (p *process) tail() string {
	raw, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// build compiles a command of this repository into the work folder.
func build(pkg string) string {
	out := filepath.Join(workDir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, "./"+pkg)
	cmd.Dir = repo.Root()
	b, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build %s: %s", pkg, b)
	return out
}

// freePort returns a port for a process under test to bind (see ports.Free).
func freePort() int { return ports.Free() }

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// metric sums the samples of a Prometheus counter or gauge whose line starts with name (labels included in name
// when given) from a /metrics endpoint.
func metric(url, name string) float64 {
	resp, err := http.Get(url) //nolint:noctx // a test scrape on loopback
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var total float64
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, name) || strings.HasPrefix(line, "#") {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != ' ' && rest[0] != '{' {
			continue // a longer metric name with the same prefix
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err == nil {
			total += v
		}
	}
	return total
}

func writeFile(name string, data []byte) string {
	path := filepath.Join(workDir, name)
	Expect(os.MkdirAll(filepath.Dir(path), 0o700)).To(Succeed())
	// Written to a temporary name and renamed, as the kubelet swaps secret volume contents atomically.
	tmp := path + ".tmp"
	Expect(os.WriteFile(tmp, data, 0o600)).To(Succeed())
	Expect(os.Rename(tmp, path)).To(Succeed())
	return path
}

func must[T any](v T, err error) T {
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return v
}

// file is the path of a file of this run.
func (w *harness) file(rel string) string { return filepath.Join(workDir, rel) }

// pid is the process ID of the current run, 0 before the first start; a restart changes it.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
