// Package process runs the child programs of the local system and of the tests (control planes, OCM's components,
// squid, the product's binaries): each with its log file, ended by PID only, and killed if the thread that started it
// dies.
package process

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Command is a child program to run with Run.
type Command struct {
	Path string
	Args []string
	// Env is the environment; nil inherits this process's.
	Env []string
	// Dir is the working folder; "" is this process's.
	Dir string
	// LogPath receives stdout and stderr: truncated, or appended to when AppendLog.
	LogPath   string
	AppendLog bool
	// Header is written to the log before the program starts.
	Header string
	// OnExit, when set, writes to the log after the program ended, before Done is closed; how is ExitDescription's.
	OnExit func(log io.Writer, how string)
	// OwnGroup puts the child in its own process group, so a terminal's Ctrl-C reaches only the caller, which then
	// stops its children in order.
	OwnGroup bool
	// OwnedDir, when set, is a folder of the program's own (its kubeconfig, say) that Stop removes.
	OwnedDir string
}

// Process is a running child program. It is killed if the thread that started it dies, and ended by PID with Stop or
// Terminate, never by name.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{} // closed when the process has ended and been reaped
	err     error         // Wait's result, set before done is closed
	dir     string        // Command.OwnedDir, removed by Stop
}

// Run starts c. The log file stays open until the process ends.
func Run(c Command) (*Process, error) {
	flags := os.O_CREATE | os.O_WRONLY | os.O_TRUNC
	if c.AppendLog {
		flags = os.O_CREATE | os.O_WRONLY | os.O_APPEND
	}
	logFile, err := os.OpenFile(c.LogPath, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open the log of %s: %w", c.Path, err)
	}
	if c.Header != "" {
		_, _ = io.WriteString(logFile, c.Header)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env, cmd.Dir = c.Env, c.Dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: c.OwnGroup}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", c.Path, err)
	}
	p := &Process{cmd: cmd, logPath: c.LogPath, started: time.Now(), done: make(chan struct{}), dir: c.OwnedDir}
	go func() {
		p.err = cmd.Wait()
		if c.OnExit != nil {
			c.OnExit(logFile, exitDescription(p.err))
		}
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// StartedAt is when the process started.
func (p *Process) StartedAt() time.Time { return p.started }

// LogPath is the file holding the process's output.
func (p *Process) LogPath() string { return p.logPath }

// Done is closed once the process has ended and its log is closed.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended, and Wait's result if so (an *exec.ExitError for a non-zero exit or a
// signal).
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// ExitDescription says how the process ended ("exit status 1", "signal: killed"), "" while it runs.
func (p *Process) ExitDescription() string {
	done, err := p.Exited()
	if !done {
		return ""
	}
	return exitDescription(err)
}

// exitDescription says how a process ended, from Wait's result.
func exitDescription(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// Terminate sends SIGTERM and waits up to grace for the process to end, then sends SIGKILL; it returns once the
// process is reaped, and whether it had to be killed.
func (p *Process) Terminate(grace time.Duration) (killed bool) {
	if done, _ := p.Exited(); done {
		return false
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may have ended in between: done tells
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

// Stop ends the process (SIGKILL 10 s after SIGTERM) and removes its OwnedDir.
func (p *Process) Stop() {
	p.Terminate(10 * time.Second)
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
	}
}

// Tail is the last n lines of the process's log, joined; "" when the log cannot be read.
func (p *Process) Tail(n int) string {
	lines, _ := TailLines(p.logPath, n)
	return strings.Join(lines, "\n")
}

// TailLines returns the last n lines of a file, to explain a failure.
func TailLines(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	scanner := bufio.NewScanner(f)
	// Structured log lines with stack traces can be long; don't fail on them.
	scanner.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for scanner.Scan() {
		lines = append(lines, scanner.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines, scanner.Err()
}

// Output runs cmd and returns its stdout, or an error that starts with what and quotes its stderr.
func Output(cmd *exec.Cmd, what string) (string, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", what, err, stderr.String())
	}
	return string(out), nil
}
