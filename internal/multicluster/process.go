package multicluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// stopTimeout is how long a process gets to end after SIGTERM before SIGKILL.
const stopTimeout = 15 * time.Second

// process is a child program with its output in a log file, stopped by PID.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has ended
	err     error         // Wait's result, set before done is closed
	stopped atomic.Bool   // stop was called: an exit is expected
}

// startProcess runs bin with args, its stdout and stderr in logPath and TMPDIR set to tmpDir, so what it creates
// with os.MkdirTemp stays in the work folder. The child is killed if the calling thread dies.
func startProcess(name, bin, logPath, tmpDir string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), "TMPDIR="+tmpDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the process ID.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process and waits for it; SIGKILL after stopTimeout. A process that ends by the
// signal is a clean stop.
func (p *process) stop() error {
	p.stopped.Store(true)
	if done, _ := p.exited(); done {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal %s (pid %d): %w", p.name, p.pid(), err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM and was killed", p.name, p.pid(), stopTimeout)
	}
}

// logTail returns the last lines of the process's log, to explain a failure.
func (p *process) logTail(lines int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	all := strings.Split(string(bytes.TrimRight(data, "\n")), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// diedError describes a process that ended on its own.
func (p *process) diedError() error {
	_, err := p.exited()
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("%s (pid %d) exited: %w; last lines of %s:\n%s", p.name, p.pid(), err,
		filepath.Base(p.logPath), p.logTail(20))
}
