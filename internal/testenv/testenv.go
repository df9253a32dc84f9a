// Package testenv starts real control planes for tests and the local environment: envtest's etcd and
// kube-apiserver with the operator's and OCM's CRDs, plus kube-controller-manager for garbage collection.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
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

// RepoRoot is the root of this repository, found from this source file.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// CRDPaths are the operator's CRDs and the OCM hub CRDs, read from the open-cluster-management.io/api module
// in the Go module cache.
func CRDPaths() ([]string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "open-cluster-management.io/api")
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("locate the open-cluster-management.io/api module (run 'go mod download'): %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return nil, errors.New("open-cluster-management.io/api is not in the module cache: run 'go mod download'")
	}
	paths := []string{filepath.Join(RepoRoot(), "config", "crd", "bases")}
	for _, p := range ocmHubCRDs {
		paths = append(paths, filepath.Join(dir, p))
	}
	return paths, nil
}

// NewHub returns an envtest environment with every CRD the hub needs. KUBEBUILDER_ASSETS must point at the
// folder 'make envtest-assets' prints.
func NewHub() (*envtest.Environment, error) {
	paths, err := CRDPaths()
	if err != nil {
		return nil, err
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run 'make envtest-assets' and export the folder it prints")
	}
	return &envtest.Environment{CRDDirectoryPaths: paths, ErrorIfCRDPathMissing: true}, nil
}

// Process is a program started against the hub with its own admin kubeconfig, stopped with Stop.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has ended
	dir  string
}

// StartProcess runs bin with args plus --kubeconfig=<a kubeconfig of user, a cluster admin>, its output in logPath.
// The process dies with the caller.
func StartProcess(env *envtest.Environment, user, bin, logPath string, args ...string) (*Process, error) {
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, rest.CopyConfig(env.Config))
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", user, err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "process-")
	if err != nil {
		return nil, err
	}
	kcPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kcPath, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig=" + kcPath}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), dir: dir}
	go func() {
		_ = cmd.Wait() // it exits non-zero when stopped by a signal, which is how it is stopped
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// StartGarbageCollector runs kube-controller-manager (from KUBEBUILDER_ASSETS) with only the garbage collector,
// so owner references are honoured as on a real cluster.
func StartGarbageCollector(env *envtest.Environment, logPath string) (*Process, error) {
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager")
	return StartProcess(env, "kube-controller-manager", bin, logPath,
		"--controllers=garbagecollector", "--leader-elect=false", "--secure-port=0", "--concurrent-gc-syncs=5", "--v=1")
}

// Pid is the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop ends the process and removes its files.
func (p *Process) Stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	_ = os.RemoveAll(p.dir)
}
