package localenv

import (
	"context"
	"fmt"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

const (
	// managerStopGrace is how long the manager gets to finish its reconciles after SIGTERM.
	managerStopGrace = 10 * time.Second
	// logTailLines is how much of manager.log is shown when something goes wrong.
	logTailLines = 20
)

// startManager runs the manager binary against the hub with the metrics and probe endpoints off, so two
// localhubs (or a real manager) on the same machine never fight over ports. Its own process group means a terminal's
// Ctrl-C reaches only localhub, which stops the manager while the API server is still up, instead of both shutting
// down at once; it dies with localhub even when localhub is killed without a chance to clean up.
func (s *session) startManager(context.Context) error {
	s.p.step("starting manager %s", s.opts.ManagerPath)
	m, err := testenv.Run(testenv.Command{Path: s.opts.ManagerPath, OwnGroup: true, LogPath: s.path(managerLogFile),
		Args: []string{"--kubeconfig=" + s.path(managerKubeconfigFile), "--metrics-bind-address=0", "--health-probe-bind-address=0"}})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	s.manager = m
	s.cleanups.push("stopping manager", func() error {
		if m.Terminate(managerStopGrace) {
			return fmt.Errorf("manager did not stop within %s after SIGTERM; killed it", managerStopGrace)
		}
		return nil
	})
	s.p.detail("pid %d, log %s", m.Pid(), m.LogPath())
	return nil
}

// managerExitedEarly reports a manager that ended while localhub still needed it, with the end of its log,
// because the work folder holding the full log may be removed during cleanup.
func (s *session) managerExitedEarly() error {
	s.p.step("manager exited early (%s)", s.manager.ExitDescription())
	s.printLogTail(s.manager.LogPath())
	return fmt.Errorf("manager exited early: %s", s.manager.ExitDescription())
}

// printLogTail prints the last lines of a log file, or why it cannot.
func (s *session) printLogTail(path string) {
	lines, err := testenv.TailLines(path, logTailLines)
	if err != nil {
		s.p.detail("cannot read %s: %v", path, err)
		return
	}
	s.p.detail("last %d lines of %s:", len(lines), path)
	s.p.quote(lines)
}
