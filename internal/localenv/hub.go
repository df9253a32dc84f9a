package localenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// Files in the work folder.
const (
	adminKubeconfigFile   = "hub.kubeconfig"
	managerKubeconfigFile = "manager.kubeconfig"
	managerLogFile        = "manager.log"
	gcLogFile             = "kube-controller-manager.log"
)

// Users of the hub. Both are cluster admins for now; the manager's RBAC is not enforced locally.
const (
	adminUser   = "admin"
	managerUser = "cluster-proxy-operator"
)

// prepareWorkDir creates or adopts the work folder; only a folder created here is removed at exit.
func (s *session) prepareWorkDir(context.Context) error {
	if s.opts.WorkDir == "" {
		dir, err := os.MkdirTemp("", "cluster-proxy-localhub-*")
		if err != nil {
			return fmt.Errorf("create work folder: %w", err)
		}
		s.workDir = dir
		s.cleanups.push("removing "+dir, func() error { return os.RemoveAll(dir) })
	} else {
		dir, err := filepath.Abs(s.opts.WorkDir)
		if err != nil {
			return fmt.Errorf("resolve work folder %s: %w", s.opts.WorkDir, err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create work folder: %w", err)
		}
		s.workDir = dir
	}
	s.p.step("work folder %s", s.workDir)
	return s.placeTempFiles()
}

// placeTempFiles points TMPDIR at the work folder: envtest and the garbage collector create their folders with
// os.MkdirTemp(""), and keeping them there leaves nothing behind in /tmp if localhub is killed.
func (s *session) placeTempFiles() error {
	old, had := os.LookupEnv("TMPDIR")
	if err := os.Setenv("TMPDIR", s.workDir); err != nil {
		return fmt.Errorf("set TMPDIR: %w", err)
	}
	s.cleanups.push("", func() error {
		if had {
			return os.Setenv("TMPDIR", old)
		}
		return os.Unsetenv("TMPDIR")
	})
	return nil
}

// startHub starts etcd and kube-apiserver with the operator's and OCM's CRDs.
func (s *session) startHub(context.Context) error {
	s.p.step("starting hub control plane (etcd + kube-apiserver)")
	env, err := testenv.NewHub()
	if err != nil {
		return fmt.Errorf("configure hub control plane: %w", err)
	}
	// Pushed before Start: a Start that fails half-way (e.g. on a CRD) leaves etcd and kube-apiserver running.
	s.cleanups.push("stopping hub control plane", env.Stop)
	if _, err := env.Start(); err != nil {
		return fmt.Errorf("start hub control plane: %w", err)
	}
	s.env = env
	s.p.detail("kube-apiserver at %s, %d CRDs installed", env.Config.Host, len(env.CRDs))
	return s.connect()
}

// connect builds the client localhub itself uses: typed for the operator's kinds, unstructured for samples.
func (s *session) connect() error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	if err := proxyv1alpha1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("build scheme: %w", err)
	}
	c, err := client.New(s.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("create hub client: %w", err)
	}
	s.client = c
	return nil
}

// writeKubeconfigs gives the user and the manager their own credentials, so the API server's audit and
// managedFields tell their writes apart.
func (s *session) writeKubeconfigs(context.Context) error {
	s.p.step("writing kubeconfigs")
	if err := writeKubeconfig(s.env, adminUser, s.path(adminKubeconfigFile)); err != nil {
		return err
	}
	if err := writeKubeconfig(s.env, managerUser, s.path(managerKubeconfigFile)); err != nil {
		return err
	}
	s.p.detail("user %s: %s", adminUser, s.path(adminKubeconfigFile))
	s.p.detail("user %s: %s", managerUser, s.path(managerKubeconfigFile))
	return nil
}

func writeKubeconfig(env *envtest.Environment, user, path string) error {
	if _, err := testenv.AdminKubeconfig(env, user, path); err != nil {
		return fmt.Errorf("kubeconfig of hub user %s: %w", user, err)
	}
	return nil
}

// startGarbageCollector runs kube-controller-manager's garbage collector, so deleting a configuration removes
// what the operator created for it, as on a real hub.
func (s *session) startGarbageCollector(context.Context) error {
	s.p.step("starting garbage collector (kube-controller-manager)")
	gc, err := testenv.StartGarbageCollector(s.env, s.path(gcLogFile))
	if err != nil {
		return fmt.Errorf("start garbage collector: %w", err)
	}
	s.cleanups.push("stopping garbage collector", func() error { gc.Stop(); return nil })
	return nil
}
