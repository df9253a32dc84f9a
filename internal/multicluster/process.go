package multicluster

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// stopTimeout is how long a process gets to end after SIGTERM before SIGKILL.
const stopTimeout = 15 * time.Second

// process is a named child program of the environment.
type process struct {
	*testenv.Process
	name    string
	stopped atomic.Bool // stop was called: an exit is expected
}

// startProcess runs bin with args, its stdout and stderr appended to logPath and TMPDIR set to tmpDir, so what it
// creates with os.MkdirTemp stays in the work folder.
func startProcess(name, bin, logPath, tmpDir string, args ...string) (*process, error) {
	p, err := testenv.Run(testenv.Command{Path: bin, Args: args, Env: append(os.Environ(), "TMPDIR="+tmpDir),
		LogPath: logPath, AppendLog: true})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &process{Process: p, name: name}, nil
}

// stop sends SIGTERM to the process and waits for it; SIGKILL after stopTimeout. A process that ends by the
// signal is a clean stop.
func (p *process) stop() error {
	p.stopped.Store(true)
	if p.Terminate(stopTimeout) {
		return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM and was killed", p.name, p.Pid(), stopTimeout)
	}
	return nil
}

// diedError describes a process that ended on its own.
func (p *process) diedError() error {
	return fmt.Errorf("%s (pid %d) exited: %s; last lines of %s:\n%s", p.name, p.Pid(), p.ExitDescription(),
		filepath.Base(p.LogPath()), p.Tail(20))
}
