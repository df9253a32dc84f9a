// Package multicluster runs a hub and managed clusters on this machine and joins them through real Open Cluster
// Management: every cluster is an envtest kube-apiserver and etcd; the hub also runs kube-controller-manager (CSR
// signing and garbage collection) and the OCM hub components, and each managed cluster runs its klusterlet agent, all
// as processes ('ocm-local' from hack/ocm). Clusters are accepted the way 'clusteradm accept' does it.
//
// 'make run' and the end-to-end suite build the rest of the system on top of it.
package multicluster

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ocmjoin"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/proxyenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// DefaultJoinTimeout bounds the wait for every cluster to become Available once its agent runs; a join takes
// about 2 s.
const DefaultJoinTimeout = 3 * time.Minute

// ClusterSpec describes a managed cluster to create.
type ClusterSpec struct {
	// Name is the ManagedCluster name: a DNS label, which may start with a digit.
	Name string
	// Proxy, when set, is a forward proxy URL (http://host:port or https://host:port) written as proxy-url into the
	// klusterlet's bootstrap kubeconfig, so the OCM agent reaches the hub only through it (the issued hub kubeconfig
	// inherits it).
	Proxy string
	// ProxyCA is the PEM of the CA of an https:// Proxy. It is appended to the hub's CA in the bootstrap kubeconfig's
	// certificate-authority-data, as a user does for an HTTPS proxy, so the klusterlet trusts both the proxy and the
	// hub.
	ProxyCA []byte
}

// Options configure Start.
type Options struct {
	// Clusters are the managed clusters, joined to one hub.
	Clusters []ClusterSpec
	// WorkDir receives kubeconfigs, logs, certificates, etcd data and the processes' temporary files. When empty,
	// Start creates a temporary folder and Stop removes it; a folder given here is kept after Stop, and what an
	// earlier environment left in it is removed by Start.
	WorkDir string
	// OCMBinary is the ocm-local binary ('make ocm-local'); empty means bin/ocm-local in this repository.
	OCMBinary string
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// JoinTimeout bounds the wait for the clusters to become Available; zero means DefaultJoinTimeout.
	JoinTimeout time.Duration
}

// Cluster is a running managed cluster.
type Cluster struct {
	Name string
	// Config is a cluster-admin client config of the managed kube-apiserver (also in
	// WorkDir/clusters/<name>/admin.kubeconfig).
	Config *rest.Config
	// Proxy is the forward proxy the klusterlet reaches the hub through; empty when direct.
	Proxy string
	// proxyCA is the CA of an HTTPS Proxy (ClusterSpec.ProxyCA).
	proxyCA []byte

	stopControlPlane func() error
	agent            *process
}

// Env is the running environment.
type Env struct {
	// Hub is a cluster-admin client config of the hub kube-apiserver.
	Hub *rest.Config
	// HubKubeconfig is the path of the same credentials as a kubeconfig file.
	HubKubeconfig string
	// HubEnv is the hub's control plane; HubEnv.AddUser signs client certificates with the hub's client CA.
	HubEnv *envtest.Environment
	// HubClientCA and HubClientCAKey are the hub apiserver's client CA files, which kube-controller-manager signs
	// kubernetes.io/kube-apiserver-client CSRs with.
	HubClientCA, HubClientCAKey string
	// Clusters are the managed clusters, in the order of Options.Clusters.
	Clusters []*Cluster
	// WorkDir holds everything the environment wrote; logs are in WorkDir/logs.
	WorkDir string

	opts          Options
	start         time.Time
	removeWorkDir bool
	hubClient     client.Client
	stopHub       func() error
	kcm, ocmHub   *process

	mu        sync.Mutex
	processes []*process // every child started, to notice one dying
	stopOnce  sync.Once
	stopErr   error
}

// Start creates the hub and the managed clusters and returns once every cluster has joined (ManagedCluster
// Available). On error, everything it started is stopped. KUBEBUILDER_ASSETS must hold etcd, kube-apiserver and
// kube-controller-manager ('make envtest-assets').
func Start(ctx context.Context, opts Options) (*Env, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	e := &Env{opts: opts, start: time.Now()}
	if err := e.run(ctx); err != nil {
		return nil, errors.Join(err, e.Stop())
	}
	return e, nil
}

// withDefaults fills the empty fields and checks the inputs before anything starts, so a typo fails at once.
func (o Options) withDefaults() (Options, error) {
	if err := validateClusters(o.Clusters); err != nil {
		return o, err
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.JoinTimeout <= 0 {
		o.JoinTimeout = DefaultJoinTimeout
	}
	if o.OCMBinary == "" {
		o.OCMBinary = filepath.Join(testenv.RepoRoot(), "bin", "ocm-local")
	}
	if _, err := os.Stat(o.OCMBinary); err != nil {
		return o, fmt.Errorf("ocm-local binary: %w (run 'make ocm-local')", err)
	}
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return o, errors.New("KUBEBUILDER_ASSETS is not set: run 'make envtest-assets' and export the folder it prints")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-controller-manager")); err != nil {
		return o, fmt.Errorf("kube-controller-manager in KUBEBUILDER_ASSETS: %w (run 'make envtest-assets')", err)
	}
	return o, nil
}

// validateClusters checks that every cluster has a distinct DNS-label name (it becomes a namespace) and, if any, a
// proxy URL and proxy CA that proxyenv accepts, as for the AddOnDeploymentConfig the same proxy goes into. Two rules
// are added for the bootstrap kubeconfig: only an https:// proxy has a CA to trust, and the CA has no stray text.
func validateClusters(clusters []ClusterSpec) error {
	if len(clusters) == 0 {
		return errors.New("no managed cluster requested")
	}
	seen := map[string]bool{}
	for _, c := range clusters {
		if errs := validation.IsDNS1123Label(c.Name); len(errs) > 0 {
			return fmt.Errorf("cluster name %q: %s", c.Name, strings.Join(errs, "; "))
		}
		if seen[c.Name] {
			return fmt.Errorf("cluster name %q is used twice", c.Name)
		}
		seen[c.Name] = true
		settings, err := proxyenv.FromConfig(addonv1alpha1.ProxyConfig{HTTPSProxy: c.Proxy, CABundle: c.ProxyCA})
		var fieldErr *proxyenv.FieldError
		switch {
		case errors.As(err, &fieldErr) && fieldErr.Reason == proxyenv.ReasonInvalidProxyCABundle:
			return fmt.Errorf("ProxyCA of cluster %s: %s", c.Name, fieldErr.Message)
		case errors.As(err, &fieldErr):
			return fmt.Errorf("proxy of cluster %s: %s", c.Name, fieldErr.Message)
		case err != nil:
			return fmt.Errorf("proxy of cluster %s: %w", c.Name, err)
		}
		if len(settings.CABundle) == 0 {
			continue
		}
		if !strings.HasPrefix(strings.ToLower(settings.HTTPSProxy), "https://") {
			return fmt.Errorf("ProxyCA of cluster %s: only an https:// Proxy has a CA to trust, the proxy is %q", c.Name, c.Proxy)
		}
		if _, rest := lastPEMBlock(c.ProxyCA); len(bytes.TrimSpace(rest)) > 0 {
			return fmt.Errorf("ProxyCA of cluster %s: text after the last PEM block is not PEM", c.Name)
		}
	}
	return nil
}

// lastPEMBlock returns the last PEM block of data and what follows it.
func lastPEMBlock(data []byte) (last *pem.Block, rest []byte) {
	rest = data
	for block, r := pem.Decode(rest); block != nil; block, r = pem.Decode(rest) {
		last, rest = block, r
	}
	return last, rest
}

func (e *Env) run(ctx context.Context) error {
	steps := []struct {
		what string
		fn   func(context.Context) error
	}{
		{"preparing work folder", e.prepareWorkDir},
		{"starting hub control plane (etcd, kube-apiserver, OCM and operator CRDs)", e.startHub},
		{"starting kube-controller-manager (csrsigning, garbagecollector) and the OCM hub", e.startHubProcesses},
		{"starting managed clusters and their klusterlet agents", e.startClusters},
		{"accepting clusters", e.joinClusters},
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		e.logf("==> %s", s.what)
		if err := s.fn(ctx); err != nil {
			return err
		}
	}
	e.logf("==> all %d clusters joined", len(e.Clusters))
	return nil
}

// Cluster returns the managed cluster called name, or nil.
func (e *Env) Cluster(name string) *Cluster {
	for _, c := range e.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// joinClusters accepts every cluster and waits for all of them to be Available.
func (e *Env) joinClusters(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, e.opts.JoinTimeout)
	defer cancel()
	errs := make([]error, len(e.Clusters))
	var wg sync.WaitGroup
	for i, c := range e.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			check := func() error {
				if p := e.deadProcess(); p != nil {
					return p.diedError()
				}
				return nil
			}
			if errs[i] = ocmjoin.Accept(ctx, e.hubClient, c.Name, check, e.logf); errs[i] == nil {
				e.logf("    cluster %s joined (Available)", c.Name)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stop stops what Start started, by PID and in dependency order: the klusterlet agents and the OCM hub first (an
// apiserver with a connected agent takes long to stop), then kube-controller-manager, the managed control planes and
// the hub's. A work folder Start created is removed. Calling it again returns the first result.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		var errs []error
		var wg sync.WaitGroup
		var mu sync.Mutex
		parallel := func(fns ...func() error) {
			for _, fn := range fns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := fn(); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
		}
		e.logf("==> stopping")
		var agents, planes []func() error
		for _, c := range e.Clusters {
			if c != nil && c.agent != nil {
				agents = append(agents, c.agent.stop)
			}
			if c != nil && c.stopControlPlane != nil {
				planes = append(planes, c.stopControlPlane)
			}
		}
		parallel(agents...)
		for _, p := range []*process{e.ocmHub, e.kcm} {
			if p != nil {
				parallel(p.stop)
			}
		}
		parallel(planes...)
		if e.stopHub != nil {
			parallel(e.stopHub)
		}
		if e.removeWorkDir && e.WorkDir != "" {
			if err := os.RemoveAll(e.WorkDir); err != nil {
				errs = append(errs, err)
			}
		}
		e.stopErr = errors.Join(errs...)
		e.logf("==> stopped")
	})
	return e.stopErr
}

// startProcess starts a child with its log in WorkDir/logs/<name>.log and remembers it.
func (e *Env) startProcess(name, bin string, args ...string) (*process, error) {
	p, err := startProcess(name, bin, e.path("logs", name+".log"), e.path("tmp"), args...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.processes = append(e.processes, p)
	e.mu.Unlock()
	return p, nil
}

// deadProcess returns a child that ended without being stopped, or nil.
func (e *Env) deadProcess() *process {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range e.processes {
		if done, _ := p.Exited(); done && !p.stopped.Load() {
			return p
		}
	}
	return nil
}

// Err reports a child process (kube-controller-manager, the OCM hub or an agent) that ended on its own since Start,
// with the end of its log; nil while all run.
func (e *Env) Err() error {
	if p := e.deadProcess(); p != nil {
		return p.diedError()
	}
	return nil
}

func (e *Env) path(elem ...string) string {
	return filepath.Join(append([]string{e.WorkDir}, elem...)...)
}

func (e *Env) logf(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Fprintf(e.opts.Log, "[%6.1fs] %s\n", time.Since(e.start).Seconds(), fmt.Sprintf(format, args...))
}
