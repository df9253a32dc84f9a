// Package testenv starts real control planes for tests: envtest's etcd and kube-apiserver with the operator's and
// OCM's CRDs, plus kube-controller-manager for garbage collection, and the clients and checks the suites share. Tests
// only: the local system shares with it what both need through the leaves process, kubeclient and repo.
package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// NewHub returns an envtest environment with every CRD the hub needs. KUBEBUILDER_ASSETS must point at the
// folder 'make envtest-assets' prints.
func NewHub() (*envtest.Environment, error) {
	return newEnvironment(repo.CRDPaths())
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

// StartProcess runs bin with args plus --kubeconfig=<a kubeconfig of user, a cluster admin>, its output in logPath.
// The process dies with the caller.
func StartProcess(env *envtest.Environment, user, bin, logPath string, args ...string) (*process.Process, error) {
	dir, err := os.MkdirTemp("", "process-")
	if err != nil {
		return nil, err
	}
	kcPath, err := AdminKubeconfig(env, user, filepath.Join(dir, "kubeconfig"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p, err := process.Run(process.Command{Path: bin, Args: append([]string{"--kubeconfig=" + kcPath}, args...), LogPath: logPath, OwnedDir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

// StartGarbageCollector runs kube-controller-manager (from KUBEBUILDER_ASSETS) with only the garbage collector,
// so owner references are honoured as on a real cluster.
func StartGarbageCollector(env *envtest.Environment, logPath string) (*process.Process, error) {
	bin, args := KubeControllerManager("garbagecollector")
	return StartProcess(env, "kube-controller-manager", bin, logPath, args...)
}

// KubeControllerManager is kube-controller-manager from KUBEBUILDER_ASSETS and its arguments to run only the given
// controllers next to an envtest control plane: no leader election, no serving port.
func KubeControllerManager(controllers ...string) (bin string, args []string) {
	return filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kube-controller-manager"), []string{
		"--controllers=" + strings.Join(controllers, ","), "--leader-elect=false", "--secure-port=0", "--concurrent-gc-syncs=5", "--v=1"}
}
