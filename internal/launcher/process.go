package launcher

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one run of a pod's program.
type process struct {
	cmd     *exec.Cmd
	hash    string // the pod template it was started from
	started time.Time
	done    chan struct{} // closed once the process has exited and been reaped
	err     error         // how it exited; read after done
}

// startProcess runs the command line with its output appended to logPath. The process gets its own process group,
// so a Ctrl-C in the terminal reaches the launcher, which stops it in order, and it is killed if the launcher dies.
func startProcess(cl *commandLine, dir, logPath, hash string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logFile, "--- launcher: %s starting %s %s\n", time.Now().Format(time.RFC3339), cl.Path, strings.Join(cl.Args, " "))
	cmd := exec.Command(cl.Path, cl.Args...)
	cmd.Env = cl.Env
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(logFile, "--- launcher: start failed: %v\n", err)
		logFile.Close()
		return nil, err
	}
	p := &process{cmd: cmd, hash: hash, started: time.Now(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logFile, "--- launcher: %s exited: %s\n", time.Now().Format(time.RFC3339), exitDescription(p.err))
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace, then sends SIGKILL, by PID; it returns once the process is reaped.
func (p *process) stop(grace time.Duration) (killed bool) {
	if p.exited() {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return false
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return true
	}
}

// exitDescription says how a process ended: "exit status 1", "signal: killed".
func exitDescription(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.Error()
	}
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// ports hands out loopback ports for the listening ports pods share, so two pods are never given the same one.
type ports struct {
	mu    sync.Mutex
	owner map[int32]string
}

// take returns rendered when nothing listens on it and no other owner holds it, else the port the owner had (when
// still free), else a free port; the owner (a pod's rendered port, "<pod>/<port>") holds it until release.
func (p *ports) take(owner string, rendered, previous int32) (int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owner == nil {
		p.owner = map[int32]string{}
	}
	usable := func(port int32) bool {
		if port == 0 {
			return false
		}
		if o, ok := p.owner[port]; ok && o != owner {
			return false
		}
		return portFree(port)
	}
	port := int32(0)
	switch {
	case usable(rendered):
		port = rendered
	case usable(previous):
		port = previous
	default:
		for range 10 {
			free, err := freePort()
			if err != nil {
				return 0, err
			}
			if usable(free) {
				port = free
				break
			}
		}
		if port == 0 {
			return 0, errors.New("no free loopback port")
		}
	}
	for q, o := range p.owner {
		if o == owner && q != port {
			delete(p.owner, q)
		}
	}
	p.owner[port] = owner
	return port, nil
}

// release frees every port of a pod.
func (p *ports) release(pod string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, o := range p.owner {
		if strings.HasPrefix(o, pod+"/") {
			delete(p.owner, q)
		}
	}
}

func portFree(port int32) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(int(port))))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func freePort() (int32, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port), nil
}
