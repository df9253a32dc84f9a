// Package system runs the whole product locally, the way a user runs it on real clusters: a hub and two managed
// clusters joined through the real OCM hub controllers and klusterlet agents (internal/multicluster), the operator's
// manager as its ServiceAccount with the least-privilege RBAC of config/rbac, the proxy-server and proxy-agents
// started from the Deployments the operator rendered (internal/launcher), and a real forward proxy (squid) that the
// first cluster reaches the hub through over TLS, for its klusterlet and its proxy-agent alike. 'make run' and the
// end-to-end suite use it.
package system

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/launcher"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/multicluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/squid"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// The names of the local system are the real-cluster system's (internal/localsystem), so both read alike.
const (
	ProxiedCluster = localsystem.ProxiedCluster
	DigitCluster   = localsystem.DigitCluster
	Namespace      = localsystem.Namespace
	// EntrypointHost is the name agents dial the proxy-server's agent port by: squid resolves it to the loopback hub
	// (its hosts_file), as a corporate proxy resolves the hub's public name.
	EntrypointHost  = localsystem.EntrypointHost
	ProxyConfigName = localsystem.ProxyConfigName
)

// Binaries are the programs the system runs.
type Binaries struct {
	Manager, ProxyServer, ProxyAgent, OCMLocal string
}

// DefaultBinaries are the programs 'make build ocm-local' puts in bin/.
func DefaultBinaries() Binaries {
	bin := filepath.Join(testenv.RepoRoot(), "bin")
	return Binaries{
		Manager: filepath.Join(bin, "manager"), ProxyServer: filepath.Join(bin, "proxy-server"),
		ProxyAgent: filepath.Join(bin, "proxy-agent"), OCMLocal: filepath.Join(bin, "ocm-local"),
	}
}

// Options configure Start.
type Options struct {
	// WorkDir holds everything; it is created when missing and kept after Stop (logs).
	WorkDir  string
	Binaries Binaries
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// ReadyTimeout bounds the wait for every cluster's tunnel to be Available.
	ReadyTimeout time.Duration
}

// Ports are the proxy-server's loopback ports of this run.
type Ports struct {
	Frontend, Agent, Health, Admin, HTTPConnect, UserServer int
}

// System is the running product.
type System struct {
	Env       *multicluster.Env
	Launcher  *launcher.Launcher
	Squid     *squid.Squid
	Ports     Ports
	HubClient client.Client
	// Resolve maps the hub's in-cluster service addresses to loopback (--resolve host:port=addr:port), for hub
	// programs started outside the cluster: the manager, kubectl-cluster_proxy, pkg/clusterproxy.
	Resolve []string
	// ManagerLog is the manager's log file.
	ManagerLog string
	// ManagerKubeconfig is the manager's identity, as when it is deployed in Namespace: the ServiceAccount and
	// least-privilege RBAC of config/rbac, with a token for the whole run.
	ManagerKubeconfig string

	opts    Options
	manager *testenv.Process
}

// stopGrace is how long the manager and squid get to end after SIGTERM before SIGKILL.
const stopGrace = 15 * time.Second

// Start brings the whole system up and returns once every cluster's ClusterProxyStatus and ManagedClusterAddOn are
// Available. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (*System, error) {
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 5 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	for name, path := range map[string]string{"manager": opts.Binaries.Manager, "proxy-server": opts.Binaries.ProxyServer,
		"proxy-agent": opts.Binaries.ProxyAgent, "ocm-local": opts.Binaries.OCMLocal} {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("%s binary: %w (run 'make build ocm-local')", name, err)
		}
	}
	s := &System{opts: opts}
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

func (s *System) logf(format string, args ...any) {
	fmt.Fprintf(s.opts.Log, "==> "+format+"\n", args...)
}

func (s *System) start(ctx context.Context) error {
	var err error
	s.Ports = Ports{Frontend: freePort(), Agent: freePort(), Health: freePort(), Admin: freePort(), HTTPConnect: freePort(), UserServer: freePort()}

	s.logf("starting the forward proxy (squid, over TLS with its own CA) that %s reaches the hub through", ProxiedCluster)
	if s.Squid, err = squid.Start(filepath.Join(s.opts.WorkDir, "squid"), squid.Options{Hosts: map[string]string{EntrypointHost: "127.0.0.1"}}); err != nil {
		return err
	}

	s.logf("starting the hub and the managed clusters %s and %s, joined through OCM", ProxiedCluster, DigitCluster)
	s.Env, err = multicluster.Start(ctx, multicluster.Options{
		Clusters: []multicluster.ClusterSpec{
			{Name: ProxiedCluster, Proxy: s.Squid.TLSURL(), ProxyCA: s.Squid.CA()},
			{Name: DigitCluster},
		},
		WorkDir:   filepath.Join(s.opts.WorkDir, "clusters"),
		OCMBinary: s.opts.Binaries.OCMLocal,
		Log:       s.opts.Log,
	})
	if err != nil {
		return err
	}
	if s.HubClient, err = client.New(s.Env.Hub, client.Options{Scheme: controllers.NewScheme()}); err != nil {
		return err
	}

	svc := render.ServiceName(s.Configuration()) + "." + Namespace + ".svc"
	s.Resolve = []string{
		fmt.Sprintf("%s:%d=127.0.0.1:%d", svc, s.Ports.Frontend, s.Ports.Frontend),
		fmt.Sprintf("%s:%d=127.0.0.1:%d", svc, s.Ports.HTTPConnect, s.Ports.HTTPConnect),
		fmt.Sprintf("%s.%s.svc:%d=127.0.0.1:%d", proxyv1alpha1.UserServerServiceName, Namespace, proxyv1alpha1.UserServerPort, s.Ports.UserServer),
	}
	s.logf("starting the manager as its ServiceAccount in %s, with the RBAC of config/rbac", Namespace)
	if err := s.startManager(ctx); err != nil {
		return err
	}
	s.logf("applying the ManagedProxyConfiguration, the forward-proxy AddOnDeploymentConfig and the add-ons")
	if err := s.applyConfiguration(ctx); err != nil {
		return err
	}

	s.logf("starting the proxy-server and agents from their Deployments")
	targets := make([]launcher.Target, 0, len(s.Env.Clusters))
	for _, c := range s.Env.Clusters {
		targets = append(targets, launcher.Target{Name: c.Name, Config: c.Config})
	}
	// The pods live as long as the system, not as long as the caller's start-up deadline: Stop ends them.
	s.Launcher, err = launcher.Start(context.WithoutCancel(ctx), launcher.Options{
		Hub:       launcher.Target{Name: "hub", Config: s.Env.Hub},
		Clusters:  targets,
		Binaries:  launcher.Binaries{ProxyServer: s.opts.Binaries.ProxyServer, ProxyAgent: s.opts.Binaries.ProxyAgent},
		WorkDir:   filepath.Join(s.opts.WorkDir, "pods"),
		Log:       s.opts.Log,
		Addresses: map[string]string{net.JoinHostPort(EntrypointHost, strconv.Itoa(s.Ports.Agent)): net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Ports.Agent))},
	})
	if err != nil {
		return err
	}
	s.logf("waiting for every cluster's tunnel to be Available (certificates by CSR, agents, probes)")
	return s.waitAvailable(ctx)
}

// Configuration is the ManagedProxyConfiguration of the local system: this run's ports, a Hostname entrypoint the
// forward proxy can resolve, and the user-server on.
func (s *System) Configuration() *proxyv1alpha1.ManagedProxyConfiguration {
	return &proxyv1alpha1.ManagedProxyConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName},
		Spec: proxyv1alpha1.ManagedProxyConfigurationSpec{
			ProxyServer: proxyv1alpha1.ManagedProxyConfigurationProxyServer{
				Image: "local/cluster-proxy:dev", Replicas: 1, Namespace: Namespace,
				Entrypoint: &proxyv1alpha1.ManagedProxyConfigurationProxyServerEntrypoint{
					Type: proxyv1alpha1.EntryPointTypeHostname, Hostname: &proxyv1alpha1.EntryPointHostname{Value: EntrypointHost},
					Port: int32(s.Ports.Agent),
				},
				// The user-server Service keeps port 9092; only its process listens elsewhere on this shared loopback.
				AdditionalArgs: []string{"--user-server-port=" + strconv.Itoa(s.Ports.UserServer)},
			},
			ProxyAgent: proxyv1alpha1.ManagedProxyConfigurationProxyAgent{Image: "local/cluster-proxy:dev", Replicas: 1},
			Deploy: &proxyv1alpha1.ManagedProxyConfigurationDeploy{Ports: proxyv1alpha1.ManagedProxyConfigurationDeployPorts{
				ProxyServer: int32(s.Ports.Frontend), AgentServer: int32(s.Ports.Agent), HealthServer: int32(s.Ports.Health),
				AdminServer: int32(s.Ports.Admin), HTTPConnectServer: int32(s.Ports.HTTPConnect),
			}},
			UserServer: &proxyv1alpha1.ManagedProxyConfigurationUserServer{},
		},
	}
}

func (s *System) applyConfiguration(ctx context.Context) error {
	if err := s.HubClient.Create(ctx, s.Configuration()); err != nil {
		return fmt.Errorf("create the ManagedProxyConfiguration: %w", err)
	}
	adc := &addonv1alpha1.AddOnDeploymentConfig{
		ObjectMeta: metav1.ObjectMeta{Name: ProxyConfigName, Namespace: ProxiedCluster},
		Spec: addonv1alpha1.AddOnDeploymentConfigSpec{ProxyConfig: addonv1alpha1.ProxyConfig{
			HTTPSProxy: s.Squid.TLSURL(), CABundle: s.Squid.CA(),
		}},
	}
	if err := s.HubClient.Create(ctx, adc); err != nil {
		return fmt.Errorf("create the AddOnDeploymentConfig: %w", err)
	}
	for _, c := range s.Env.Clusters {
		mca := &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.AddonName, Namespace: c.Name}}
		if c.Name == ProxiedCluster {
			mca.Spec.Configs = []addonv1alpha1.AddOnConfig{{
				ConfigGroupResource: addonv1alpha1.ConfigGroupResource{Group: "addon.open-cluster-management.io", Resource: "addondeploymentconfigs"},
				ConfigReferent:      addonv1alpha1.ConfigReferent{Namespace: ProxiedCluster, Name: ProxyConfigName},
			}}
		}
		if err := s.HubClient.Create(ctx, mca); err != nil {
			return fmt.Errorf("install the add-on on %s: %w", c.Name, err)
		}
	}
	return nil
}

func (s *System) startManager(ctx context.Context) error {
	s.ManagerKubeconfig = filepath.Join(s.opts.WorkDir, "manager", "kubeconfig")
	if err := testenv.DeployedManagerKubeconfig(ctx, s.Env.Hub, s.HubClient, Namespace, s.ManagerKubeconfig); err != nil {
		return fmt.Errorf("the manager's identity: %w", err)
	}
	s.ManagerLog = filepath.Join(s.opts.WorkDir, "manager.log")
	args := []string{"--kubeconfig=" + s.ManagerKubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0",
		"--tunnel-health-interval=5s"}
	for _, r := range s.Resolve {
		args = append(args, "--resolve="+r)
	}
	m, err := testenv.Run(testenv.Command{Path: s.opts.Binaries.Manager, Args: args, LogPath: s.ManagerLog})
	if err != nil {
		return fmt.Errorf("the manager: %w", err)
	}
	s.manager = m
	return nil
}

// Stop stops everything in reverse order; the work folder stays. It also fails when RBAC denied the manager a
// request during the run.
func (s *System) Stop() error {
	var errs []error
	if s.Launcher != nil {
		errs = append(errs, s.Launcher.Stop())
	}
	if s.manager != nil {
		s.manager.Terminate(stopGrace)
		errs = append(errs, testenv.CheckManagerRBAC(s.ManagerLog))
	}
	if s.Env != nil {
		errs = append(errs, s.Env.Stop())
	}
	if s.Squid != nil {
		errs = append(errs, s.Squid.Stop())
	}
	return errors.Join(errs...)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err) // loopback always has a free port; failing here is an environment problem
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
