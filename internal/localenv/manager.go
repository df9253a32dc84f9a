package localenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

const (
	// managerStopGrace is how long the manager gets to finish its reconciles after SIGTERM.
	managerStopGrace = 10 * time.Second
	// logTailLines is how much of manager.log is shown when something goes wrong.
	logTailLines = 20
)

// managerProcess is the operator's manager running as a child process.
type managerProcess struct {
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{} // closed once the process has exited
	waitErr error         // valid after exited is closed
}

// startManager runs the manager binary against the hub with the metrics and probe endpoints off, so two
// localhubs (or a real manager) on the same machine never fight over ports.
func (s *session) startManager(context.Context) error {
	s.p.step("starting manager %s", s.opts.ManagerPath)
	m, err := startManagerProcess(s.opts.ManagerPath, s.path(managerKubeconfigFile), s.path(managerLogFile))
	if err != nil {
		return err
	}
	s.manager = m
	s.cleanups.push("stopping manager", func() error { return m.stop(managerStopGrace) })
	s.p.detail("pid %d, log %s", m.cmd.Process.Pid, m.logPath)
	return nil
}

func startManagerProcess(bin, kubeconfig, logPath string) (*managerProcess, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create manager log: %w", err)
	}
	cmd := exec.Command(bin, "--kubeconfig="+kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// The manager must not outlive localhub, even when localhub is killed without a chance to clean up.
		Pdeathsig: syscall.SIGKILL,
		// A terminal's Ctrl-C then reaches only localhub, which stops the manager while the API server is still
		// up, instead of both shutting down at once.
		Setpgid: true,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start manager %s: %w", bin, err)
	}
	m := &managerProcess{cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		m.waitErr = cmd.Wait()
		logFile.Close()
		close(m.exited)
	}()
	return m, nil
}

// stop sends SIGTERM, and SIGKILL if the manager is still running after grace.
func (m *managerProcess) stop(grace time.Duration) error {
	select {
	case <-m.exited:
		return nil
	default:
	}
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal manager: %w", err)
	}
	select {
	case <-m.exited:
		return nil
	case <-time.After(grace):
		_ = m.cmd.Process.Kill()
		<-m.exited
		return fmt.Errorf("manager did not stop within %s after SIGTERM; killed it", grace)
	}
}

// exitDescription says how the manager ended; call it only after exited is closed.
func (m *managerProcess) exitDescription() string {
	if m.waitErr == nil {
		return "exit status 0"
	}
	return m.waitErr.Error()
}

// managerExitedEarly reports a manager that ended while localhub still needed it, with the end of its log,
// because the work folder holding the full log may be removed during cleanup.
func (s *session) managerExitedEarly() error {
	s.p.step("manager exited early (%s)", s.manager.exitDescription())
	s.printLogTail(s.manager.logPath)
	return fmt.Errorf("manager exited early: %s", s.manager.exitDescription())
}

// printLogTail prints the last lines of a log file, or why it cannot.
func (s *session) printLogTail(path string) {
	lines, err := tailLines(path, logTailLines)
	if err != nil {
		s.p.detail("cannot read %s: %v", path, err)
		return
	}
	s.p.detail("last %d lines of %s:", len(lines), path)
	s.p.quote(lines)
}

// tailLines returns the last n lines of a file.
func tailLines(path string, n int) ([]string, error) {
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
