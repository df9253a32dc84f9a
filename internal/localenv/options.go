package localenv

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

const (
	// DefaultManagerPath is where 'make build' puts the manager binary.
	DefaultManagerPath = "bin/manager"
	// DefaultTimeout bounds the wait for readiness; a cold hub is usually ready within seconds.
	DefaultTimeout = 3 * time.Minute
)

// Options configure Run.
type Options struct {
	// ManagerPath is the manager binary started against the hub.
	ManagerPath string
	// SamplesPath is a folder of YAML files, or a single YAML file, whose objects are applied to the hub.
	SamplesPath string
	// WorkDir receives the kubeconfigs, the logs and the control plane's data. When empty, Run creates a
	// temporary folder and removes it at exit; a folder given here is kept.
	WorkDir string
	// Timeout bounds the wait for every ManagedProxyConfiguration to be Ready.
	Timeout time.Duration
	// ExitWhenReady stops the hub right after the summary instead of waiting for ctx to end (for smoke tests).
	ExitWhenReady bool
	// Out receives the progress lines and the summary; nil means os.Stdout.
	Out io.Writer
}

// DefaultSamplesPath is the repository's config/samples folder.
func DefaultSamplesPath() string {
	return filepath.Join(testenv.RepoRoot(), "config", "samples")
}

// withDefaults fills the empty fields and checks the inputs before anything is started, so a typo fails fast.
func (o Options) withDefaults() (Options, error) {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.ManagerPath == "" {
		o.ManagerPath = DefaultManagerPath
	}
	if o.SamplesPath == "" {
		o.SamplesPath = DefaultSamplesPath()
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	manager, err := filepath.Abs(o.ManagerPath)
	if err != nil {
		return o, fmt.Errorf("resolve manager path %s: %w", o.ManagerPath, err)
	}
	info, err := os.Stat(manager)
	if err != nil {
		return o, fmt.Errorf("manager binary: %w (run 'make build')", err)
	}
	if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return o, fmt.Errorf("manager binary %s is not an executable file", manager)
	}
	o.ManagerPath = manager
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return o, errors.New("KUBEBUILDER_ASSETS is not set: run 'make envtest-assets' and export the folder it prints")
	}
	return o, nil
}
