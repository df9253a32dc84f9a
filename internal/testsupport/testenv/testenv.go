// Package testenv starts real control planes for tests and the local environment: envtest's etcd and
// kube-apiserver with the operator's and OCM's CRDs, plus kube-controller-manager for garbage collection.
package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// ocmHubCRDs are the OCM hub CRDs the operator reads or writes, by path inside the open-cluster-management.io/api
// module. The add-on CRDs are the v1alpha1 ones: they store v1alpha1 and need no conversion webhook.
var ocmHubCRDs = []string{
	"cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml",
	"cluster/v1beta2/0000_00_clusters.open-cluster-management.io_managedclustersets.crd.yaml",
	"cluster/v1beta2/0000_01_clusters.open-cluster-management.io_managedclustersetbindings.crd.yaml",
	"cluster/v1beta1/0000_02_clusters.open-cluster-management.io_placements.crd.yaml",
	"cluster/v1beta1/0000_03_clusters.open-cluster-management.io_placementdecisions.crd.yaml",
	"work/v1/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml",
	"addon/v1alpha1/0000_00_addon.open-cluster-management.io_clustermanagementaddons.crd.yaml",
	"addon/v1alpha1/0000_01_addon.open-cluster-management.io_managedclusteraddons.crd.yaml",
	"addon/v1alpha1/0000_02_addon.open-cluster-management.io_addondeploymentconfigs.crd.yaml",
}

// extraOCMHubCRDs are the OCM v1.0.0 hub CRDs that the operator itself does not use, by path inside the
// open-cluster-management.io/api module: the add-on manager watches AddOnTemplates and the work hub manager
// ManifestWorkReplicaSets. ClusterProfiles are not needed: their controller is behind a disabled gate.
var extraOCMHubCRDs = []string{
	"addon/v1alpha1/0000_03_addon.open-cluster-management.io_addontemplates.crd.yaml",
	"work/v1alpha1/0000_00_work.open-cluster-management.io_manifestworkreplicasets.crd.yaml",
}

// OCMHubCRDFiles are every OCM hub CRD the OCM v1.0.0 hub components watch (the operator's own CRDs are not among
// them).
func OCMHubCRDFiles() ([]string, error) {
	return OCMAPIFiles(append(slices.Clone(ocmHubCRDs), extraOCMHubCRDs...)...)
}

// RepoRoot is the root of this repository, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// CRDPaths are the operator's CRDs, the OCM hub CRDs, read from the open-cluster-management.io/api module in the Go
// module cache, and the ClusterProfile CRD of sigs.k8s.io/cluster-inventory-api (a hub with OCM's ClusterProfile
// feature on).
func CRDPaths() ([]string, error) {
	ocm, err := OCMAPIFiles(ocmHubCRDs...)
	if err != nil {
		return nil, err
	}
	profiles, err := ClusterProfileCRDFile()
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(RepoRoot(), "config", "crd", "bases"), profiles}, ocm...), nil
}

// ClusterProfileCRDFile is the ClusterProfile CRD of the sigs.k8s.io/cluster-inventory-api module the operator
// builds with.
func ClusterProfileCRDFile() (string, error) {
	files, err := moduleFiles("sigs.k8s.io/cluster-inventory-api", "config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml")
	if err != nil {
		return "", err
	}
	return files[0], nil
}

// OCMAPIFiles are the paths of files of the open-cluster-management.io/api module (given by their path inside it) in
// the Go module cache.
func OCMAPIFiles(paths ...string) ([]string, error) {
	return moduleFiles("open-cluster-management.io/api", paths...)
}

// moduleFiles are the paths of files of a module of this repository's build (given by their path inside it) in the
// Go module cache.
func moduleFiles(module string, paths ...string) ([]string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("locate the %s module (run 'go mod download'): %w", module, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return nil, fmt.Errorf("%s is not in the module cache: run 'go mod download'", module)
	}
	files := make([]string, 0, len(paths))
	for _, p := range paths {
		files = append(files, filepath.Join(dir, p))
	}
	return files, nil
}

// NewHub returns an envtest environment with every CRD the hub needs. KUBEBUILDER_ASSETS must point at the
// folder 'make envtest-assets' prints.
func NewHub() (*envtest.Environment, error) {
	return newEnvironment(CRDPaths())
}

// newEnvironment is an envtest environment with the CRDs crds; it takes a CRD lookup's result as is.
func newEnvironment(crds []string, err error) (*envtest.Environment, error) {
	if err != nil {
		return nil, err
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run 'make envtest-assets' and export the folder it prints")
	}
	return &envtest.Environment{CRDDirectoryPaths: crds, ErrorIfCRDPathMissing: true}, nil
}

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
}

// Process is a running child program. It is killed if the thread that started it dies, and ended by PID with Stop or
// Terminate, never by name.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{} // closed when the process has ended and been reaped
	err     error         // Wait's result, set before done is closed
	dir     string        // removed by Stop: StartProcess's kubeconfig
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
	p := &Process{cmd: cmd, logPath: c.LogPath, started: time.Now(), done: make(chan struct{})}
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

// StartProcess runs bin with args plus --kubeconfig=<a kubeconfig of user, a cluster admin>, its output in logPath.
// The process dies with the caller.
func StartProcess(env *envtest.Environment, user, bin, logPath string, args ...string) (*Process, error) {
	dir, err := os.MkdirTemp("", "process-")
	if err != nil {
		return nil, err
	}
	kcPath, err := AdminKubeconfig(env, user, filepath.Join(dir, "kubeconfig"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p, err := Run(Command{Path: bin, Args: append([]string{"--kubeconfig=" + kcPath}, args...), LogPath: logPath})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p.dir = dir
	return p, nil
}

// StartGarbageCollector runs kube-controller-manager (from KUBEBUILDER_ASSETS) with only the garbage collector,
// so owner references are honoured as on a real cluster.
func StartGarbageCollector(env *envtest.Environment, logPath string) (*Process, error) {
	bin, args := KubeControllerManager("garbagecollector")
	return StartProcess(env, "kube-controller-manager", bin, logPath, args...)
}

// KubeControllerManager is kube-controller-manager from KUBEBUILDER_ASSETS and its arguments to run only the given
// controllers next to an envtest control plane: no leader election, no serving port.
func KubeControllerManager(controllers ...string) (bin string, args []string) {
	return filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager"), []string{
		"--controllers=" + strings.Join(controllers, ","), "--leader-elect=false", "--secure-port=0", "--concurrent-gc-syncs=5", "--v=1"}
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

// Stop ends the process (SIGKILL 10 s after SIGTERM) and removes its files.
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
