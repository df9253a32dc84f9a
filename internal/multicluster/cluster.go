package multicluster

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ocmjoin"
)

// startClusters starts every managed cluster at once: their control planes take a few seconds each to start.
func (e *Env) startClusters(ctx context.Context) error {
	crdDir := e.path("crds", "managed")
	out, err := exec.CommandContext(ctx, e.opts.OCMBinary, "crds", "managed", crdDir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("write the managed-cluster CRDs: %w: %s", err, out)
	}
	e.Clusters = make([]*Cluster, len(e.opts.Clusters))
	errs := make([]error, len(e.opts.Clusters))
	var wg sync.WaitGroup
	for i, spec := range e.opts.Clusters {
		e.Clusters[i] = &Cluster{Name: spec.Name, Proxy: spec.Proxy, proxyCA: spec.ProxyCA}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.startCluster(ctx, e.Clusters[i], crdDir)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startCluster starts one managed control plane with the klusterlet's CRDs and namespaces, writes its bootstrap
// kubeconfig (hub client certificate of the bootstrap group, proxy-url and proxy CA if any) and starts its klusterlet
// agent.
func (e *Env) startCluster(ctx context.Context, c *Cluster, crdDir string) error {
	dir := e.path("clusters", c.Name)
	env, stop, err := controlPlane{name: c.Name, dir: dir, logs: e.path("logs"), crds: []string{crdDir}}.start()
	c.stopControlPlane = stop
	if err != nil {
		return err
	}
	adminKubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if c.Config, err = addUser(env, c.Name, envtest.User{Name: "admin", Groups: []string{adminGroup}}, adminKubeconfig, "", nil); err != nil {
		return err
	}
	if err := createNamespaces(ctx, c.Config, managedNamespaces...); err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	bootstrapKubeconfig := filepath.Join(dir, "bootstrap.kubeconfig")
	bootstrap := envtest.User{Name: ocmjoin.BootstrapUser(c.Name), Groups: []string{ocmjoin.BootstrapGroup}}
	if _, err := addUser(e.HubEnv, "hub", bootstrap, bootstrapKubeconfig, c.Proxy, c.proxyCA); err != nil {
		return err
	}
	// The agent's own admin kubeconfig of its managed cluster, apart from the one handed to callers.
	agentKubeconfig := filepath.Join(dir, "klusterlet.kubeconfig")
	agentUser := envtest.User{Name: "klusterlet-agent", Groups: []string{adminGroup}}
	if _, err := addUser(env, c.Name, agentUser, agentKubeconfig, "", nil); err != nil {
		return err
	}
	agent, err := e.startProcess("agent-"+c.Name, e.opts.OCMBinary, "agent",
		"--kubeconfig="+agentKubeconfig,
		"--cluster-name="+c.Name,
		"--bootstrap-kubeconfig="+bootstrapKubeconfig,
		"--hub-kubeconfig-dir="+filepath.Join(dir, "hub-kubeconfig"),
		"--status-sync-interval=3s")
	if err != nil {
		return err
	}
	c.agent = agent
	via := "direct"
	if c.Proxy != "" {
		via = "through proxy " + c.Proxy
	}
	e.logf("    cluster %s: kube-apiserver %s, klusterlet agent pid %d, hub reached %s", c.Name, c.Config.Host, agent.Pid(), via)
	return nil
}
