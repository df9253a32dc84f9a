// Command manager runs the cluster-proxy-operator controllers on the hub.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/clusterprofile"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers/managedproxyconfiguration"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/addonapi"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/namespaces"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/statemetrics"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/tunnelhealth"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// leaderRetryPeriod is how often a manager that does not lead tries to take the leader-election Lease.
const leaderRetryPeriod = time.Second

func main() {
	var metricsAddr, probeAddr, pprofAddr string
	var leaderElect bool
	var qps float64
	var burst int
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "address the metrics endpoint binds to; 0 disables it")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address the health probe endpoint binds to")
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader so only one manager is active")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "address of the Go profiler endpoint (/debug/pprof); empty disables it")
	// A hub with thousands of clusters needs a few hundred writes per second while it converges; client-go's
	// default of 20 would make that take minutes. The API server's priority and fairness still protects it.
	flag.Float64Var(&qps, "kube-api-qps", 400, "queries per second to the hub API server")
	flag.IntVar(&burst, "kube-api-burst", 800, "burst of queries to the hub API server")
	var tunnelHealth bool
	var tunnelInterval, probeTimeout time.Duration
	var probeConcurrency int
	var resolve []string
	flag.BoolVar(&tunnelHealth, "tunnel-health", true, "probe every managed cluster's tunnel through the proxy-servers of the "+
		"default ManagedProxyConfiguration, and set the AgentConnected and TunnelHealthy conditions and the add-on's Available "+
		"(OCM Customized health check) from it; false leaves the add-on's Available to OCM's Lease check")
	flag.DurationVar(&tunnelInterval, "tunnel-health-interval", tunnelhealth.DefaultInterval, "time between two rounds of tunnel probes")
	flag.DurationVar(&probeTimeout, "tunnel-probe-timeout", tunnelhealth.DefaultProbeTimeout, "time one probe through a tunnel may take")
	flag.IntVar(&probeConcurrency, "tunnel-probe-concurrency", 0, "ignored, kept so that existing command lines still start: "+
		"the proxy-servers run the probes now, each over connections it keeps open")
	flag.Func("resolve", "host:port=addr:port, dial addr:port for host:port, e.g. the proxy-server Service where in-cluster "+
		"names do not resolve (local environments); repeatable", func(v string) error { resolve = append(resolve, v); return nil })
	zapOpts := zap.Options{}
	var tlsProfileNamespace string
	flag.StringVar(&tlsProfileNamespace, "tls-profile-namespace", inClusterNamespace(), "the namespace of OCM's ocm-tls-profile "+
		"ConfigMap, the TLS profile of configurations without spec.tlsProfile (default the manager's own); empty reads none")
	var hubServer string
	flag.StringVar(&hubServer, "hub-server", clusterprofile.DefaultHubServer, "the hub kube-apiserver's URL as ClusterProfile "+
		"consumers reach it: the server of the open-cluster-management-hub access provider")
	var rolloverGrace time.Duration
	flag.DurationVar(&rolloverGrace, "ca-rollover-grace", managedproxyconfiguration.CARolloverGrace, "how long a rotated "+
		"CA stays in the bundle after the last certificate it signed was re-issued; longer than the kubelets take to "+
		"update the pods' Secret volumes (their sync period, 1m by default, plus their cache's delay)")
	var serverNamespaces, certificateNamespaces string
	flag.StringVar(&serverNamespaces, "proxy-server-namespaces", defaultNamespaces(), "namespaces (comma-separated) the "+
		"proxy-servers may be deployed in, where the manager's Role is granted; a ManagedProxyConfiguration naming another "+
		"is refused. \"*\" is every namespace and needs the manager's namespaced rules granted cluster-wide. Default the "+
		"manager's own namespace (every namespace outside a cluster)")
	flag.StringVar(&certificateNamespaces, "proxy-certificate-namespaces", "", "namespaces (comma-separated), beside the "+
		"proxy-servers', that ProxyCertificates are issued into; the manager needs the Secrets rules of its Role in each. "+
		"A ProxyCertificate elsewhere is refused")
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")
	if probeConcurrency != 0 {
		log.Info("--tunnel-probe-concurrency is ignored: the proxy-servers run the tunnel probes")
	}
	setMemoryLimit(log)
	resolver, err := clusterproxy.ParseResolve(resolve)
	if err != nil {
		log.Error(err, "Invalid flag")
		os.Exit(2)
	}
	scope, err := parseNamespaces(serverNamespaces, certificateNamespaces)
	if err != nil {
		log.Error(err, "Invalid flag")
		os.Exit(2)
	}
	log.Info("Managing namespaces", "proxyServers", scope.ProxyServers.String(), "certificates",
		scope.ProxyServers.Union(scope.Certificates).String())
	if rolloverGrace <= 0 {
		log.Error(fmt.Errorf("--ca-rollover-grace is %s, want a positive duration", rolloverGrace), "Invalid flag")
		os.Exit(2)
	}

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	// The API server names the field manager of a write without one after the user agent: every write of the
	// operator's is then owned by cluster-proxy-operator, not by the binary's name.
	cfg.UserAgent = apply.FieldOwner
	// The add-on API's version is chosen once: a hub upgraded to serve v1beta1 keeps serving v1alpha1, and the next
	// start of the manager moves to v1beta1.
	addOnAPI, err := addonapi.DiscoverFor(cfg)
	if err != nil {
		log.Error(err, "Unable to discover the hub's add-on API")
		os.Exit(1)
	}
	log.Info("Speaking OCM's add-on API", "version", addOnAPI)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme.New(),
		Cache:                  controllers.CacheOptions(scope),
		NewCache:               addonapi.NewCacheFunc(addOnAPI),
		NewClient:              controllers.NewClientFunc(addOnAPI),
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		PprofBindAddress:       pprofAddr,
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "cluster-proxy-addon-manager.proxy.open-cluster-management.io",
		// The program ends as soon as the manager stops, so the Lease can be given up at once: a rollout's new
		// manager leads within a retry period instead of waiting for the old Lease to expire.
		LeaderElectionReleaseOnCancel: true,
		// A candidate tries every RetryPeriod, stretched by client-go's jitter of up to 1.2 times: 1 s puts a
		// rollout's handover within 2.2 s of the release (the default 2 s: 4.4 s), for one GET a second per candidate.
		RetryPeriod: ptr.To(leaderRetryPeriod),
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	opts := controllers.Options{TLSProfileNamespace: tlsProfileNamespace, HubServer: hubServer, CARolloverGrace: rolloverGrace,
		AddOnAPI: addOnAPI, Namespaces: scope}
	var tunnels *tunnelhealth.Source
	if tunnelHealth {
		// Runs on the leader only, and reads the configuration and Secrets from the manager's cache.
		tunnels = tunnelhealth.New(tunnelhealth.Options{
			Reader: mgr.GetClient(), Resolve: resolver, Interval: tunnelInterval, ProbeTimeout: probeTimeout,
			Log: ctrl.Log.WithName("tunnel-health"),
		})
		if err := mgr.Add(tunnels); err != nil {
			log.Error(err, "Unable to add the tunnel health source")
			os.Exit(1)
		}
		opts.Tunnels = tunnels
		opts.Records, opts.RecordChanges = tunnels, tunnels.RecordChanges()
	}
	registerMetrics(metrics.Registry, statemetrics.New(mgr.GetClient(), mgr.Elected()), tunnels)
	if err := controllers.Setup(ctx, mgr, opts); err != nil {
		log.Error(err, "Unable to set up the controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to add the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Unable to add the ready check")
		os.Exit(1)
	}
	log.Info("Starting the manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "The manager stopped with an error")
		os.Exit(1)
	}
}

// registerMetrics adds to reg, beside what controller-runtime and the controllers register, the state of every
// cluster, certificate and configuration (read from the cache at scrape time, on the leader) and, when tunnel health
// runs, its view of the proxy-servers. docs/metrics.md lists what reg then holds (cmd/manager's test checks it).
func registerMetrics(reg prometheus.Registerer, state *statemetrics.Collector, tunnels *tunnelhealth.Source) {
	reg.MustRegister(state)
	if tunnels != nil {
		reg.MustRegister(tunnels)
	}
}

// defaultNamespaces is the manager's own namespace in a cluster, every namespace outside one.
func defaultNamespaces() string {
	if ns := inClusterNamespace(); ns != "" {
		return ns
	}
	return namespaces.Wildcard
}

// parseNamespaces reads --proxy-server-namespaces and --proxy-certificate-namespaces ("" is none beyond the first).
func parseNamespaces(servers, certificates string) (controllers.Namespaces, error) {
	var out controllers.Namespaces
	var err error
	if out.ProxyServers, err = namespaces.Parse("proxy-server-namespaces", servers); err != nil {
		return out, err
	}
	out.Certificates = out.ProxyServers
	if strings.TrimSpace(certificates) != "" {
		out.Certificates, err = namespaces.Parse("proxy-certificate-namespaces", certificates)
	}
	return out, err
}

// inClusterNamespace is the namespace of the manager's pod, "" outside a cluster.
func inClusterNamespace() string {
	raw, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// memoryLimitRatio is the share of the container's memory limit the Go runtime aims below; the rest is for memory it
// does not see (stacks of threads, the binary, buffers of the kernel charged to the container).
const memoryLimitRatio = 0.9

// setMemoryLimit makes the garbage collector aim below the container's memory limit. The manager's live heap is a
// fraction of its peak: while a large fleet converges, garbage between two collections would take it over the limit
// the install paths set (256Mi: 10,000 clusters peaked at 338 MiB without this), and the kernel would kill it. Near
// the limit the runtime collects more often instead. GOMEMLIMIT or AUTOMEMLIMIT=off in the environment wins; outside
// a memory-limited cgroup nothing changes.
func setMemoryLimit(log logr.Logger) {
	limit, err := memlimit.SetGoMemLimitWithOpts(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
	switch {
	case err != nil:
		log.Error(err, "Cannot read the container's memory limit; the Go runtime sets no limit of its own")
	case limit > 0:
		log.Info("Go memory limit set below the container's", "bytes", limit, "ratio", memoryLimitRatio)
	}
}
