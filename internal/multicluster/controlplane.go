package multicluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// Namespaces the klusterlet expects on its managed cluster; the klusterlet operator would create them.
var managedNamespaces = []string{agentNamespace, "open-cluster-management-agent-addon"}

const (
	// agentNamespace holds the klusterlet's hub-kubeconfig-secret and is the agent's component namespace.
	agentNamespace = "open-cluster-management-agent"
	// adminGroup makes a user cluster admin.
	adminGroup = "system:masters"
)

// hubCRDPaths are the operator's CRDs and every OCM hub CRD the OCM v1.0.0 hub components watch.
func hubCRDPaths() ([]string, error) {
	ocm, err := testenv.OCMHubCRDFiles()
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")}, ocm...), nil
}

// controlPlane describes one envtest control plane to start.
type controlPlane struct {
	name  string        // for logs
	dir   string        // certificates, etcd data
	logs  string        // folder of kube-apiserver.log and etcd.log
	crds  []string      // CRD files or folders
	authn envtest.Authn // nil: envtest's default client-certificate authn
}

// start runs etcd and kube-apiserver with the CRDs installed. Everything it creates is under cp.dir and cp.logs, not
// in TMPDIR. The returned stop func is valid even when start fails half-way (it then stops what did start).
func (cp controlPlane) start() (*envtest.Environment, func() error, error) {
	certDir, dataDir := filepath.Join(cp.dir, "apiserver"), filepath.Join(cp.dir, "etcd")
	for _, d := range []string{certDir, dataDir, cp.logs} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, nil, err
		}
	}
	apiLog, err := os.Create(filepath.Join(cp.logs, cp.name+"-kube-apiserver.log"))
	if err != nil {
		return nil, nil, err
	}
	etcdLog, err := os.Create(filepath.Join(cp.logs, cp.name+"-etcd.log"))
	if err != nil {
		apiLog.Close()
		return nil, nil, err
	}
	api := &envtest.APIServer{CertDir: certDir, Out: apiLog, Err: apiLog}
	api.Authn = cp.authn
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer: api,
			Etcd:      &envtest.Etcd{DataDir: dataDir, Out: etcdLog, Err: etcdLog},
		},
		CRDDirectoryPaths:     cp.crds,
		ErrorIfCRDPathMissing: true,
		// Several control planes start at once on a small machine; envtest's default of 20 s is too tight there.
		ControlPlaneStartTimeout: time.Minute,
	}
	stop := func() error {
		err := env.Stop()
		apiLog.Close()
		etcdLog.Close()
		return err
	}
	if _, err := env.Start(); err != nil {
		return nil, stop, fmt.Errorf("start %s control plane: %w", cp.name, err)
	}
	return env, stop, nil
}

// addUser provisions a user of env and writes its kubeconfig to path. proxyURL, when set, becomes the cluster's
// proxy-url, and proxyCA (PEM of an HTTPS proxy's CA) is appended to its certificate-authority-data.
func addUser(env *envtest.Environment, contextName string, user envtest.User, path, proxyURL string, proxyCA []byte) (*rest.Config, error) {
	u, err := env.AddUser(user, nil)
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", user.Name, err)
	}
	cfg := u.Config()
	if err := testenv.WriteKubeconfig(path, contextName, cfg, proxyURL, proxyCA); err != nil {
		return nil, err
	}
	return cfg, nil
}

// createNamespaces creates the namespaces, tolerating ones that exist.
func createNamespaces(ctx context.Context, cfg *rest.Config, names ...string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("create namespace %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
