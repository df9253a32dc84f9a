// Command proxy-agent runs on a managed cluster: it keeps reverse tunnels to the hub's proxy-servers and serves the
// hub's dials through them (the kube-apiserver and the in-process service-proxy). See docs/data-plane.md.
package main

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/agent/serviceproxy"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/allowlist"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/resolve"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract/tlsreload"
)

// certReloadInterval is how often the certificate files are checked for renewed content.
const certReloadInterval = 5 * time.Second

type config struct {
	serverHost          string
	serverPort          int
	identifiers         string
	clusterName         string
	agentID             string
	caCert              string
	proxyCACert         string
	agentCert           string
	agentKey            string
	hubKubeconfig       string
	kubeconfig          string
	healthPort          int
	healthBindAddress   string
	serviceProxyPort    int
	allowedServices     []string
	leaseNamespace      string
	resolve             []string
	readBufferSize      int
	keepaliveTime       time.Duration
	serviceDomain       string
	enableImpersonation bool
	serviceCAFile       string
	oidc                oidcFlags
	verbosity           int
	portForward         struct {
		namespace, selector string
		port                int
	}
}

// appendTo is the Set of a flag that may be given several times.
func appendTo(values *[]string) func(string) error {
	return func(v string) error { *values = append(*values, v); return nil }
}

func main() {
	hostname, _ := os.Hostname()
	var c config
	fs := flag.CommandLine
	bindFlags(fs, &c, hostname)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	flag.Parse()
	if c.verbosity > 0 && zapOpts.Level == nil {
		zapOpts.Level = zapcore.Level(-c.verbosity)
	}
	log := zap.New(zap.UseFlagOptions(&zapOpts))
	// Libraries log through controller-runtime\'s logger (the service-proxy, the user-server).
	ctrllog.SetLogger(log)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error(err, "The proxy-agent stopped")
		os.Exit(1)
	}
}

// bindFlags defines the flags that fill c on fs; hostname is the default agent ID.
func bindFlags(fs *flag.FlagSet, c *config, hostname string) {
	fs.StringVar(&c.serverHost, "proxy-server-host", "", "host name of the proxy-server's agent endpoint; its certificate must carry it")
	fs.IntVar(&c.serverPort, "proxy-server-port", 8091, "port of the proxy-server's agent endpoint")
	fs.StringVar(&c.identifiers, "agent-identifiers", "", "agent identifiers sent to the proxy-server, e.g. host=<cluster>&host=<cluster>.<namespace>")
	fs.StringVar(&c.clusterName, "cluster-name", "", "name of the managed cluster this agent serves")
	fs.StringVar(&c.agentID, "agent-id", hostname, "ID of this agent at the proxy-servers")
	fs.StringVar(&c.caCert, "ca-cert", "", "the hub's CA bundle: verifies the proxy-server and the hub's impersonator, nothing else")
	fs.StringVar(&c.proxyCACert, "proxy-ca-cert", "", "CA bundle that verifies an https forward proxy on the TLS hop to it, and nothing else; "+
		"empty: the system roots")
	fs.StringVar(&c.agentCert, "agent-cert", "", "agent client certificate")
	fs.StringVar(&c.agentKey, "agent-key", "", "agent client key")
	fs.StringVar(&c.hubKubeconfig, "hub-kubeconfig", "", "the add-on's hub kubeconfig, for the PortForward entrypoint; optional")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the managed cluster; empty for the in-cluster configuration")
	fs.IntVar(&c.healthPort, "health-server-port", contract.AgentHealthPort, "port of /healthz, /readyz and /metrics")
	fs.StringVar(&c.healthBindAddress, "health-bind-address", "", "address the health server binds to; empty for all interfaces")
	fs.IntVar(&c.serviceProxyPort, "service-proxy-port", contract.ServiceProxyPort, "tunnel port of the in-process service-proxy; 0 turns it off")
	fs.Func("allowed-service", "service the service-proxy may reach, namespace/name[:port]; repeatable", appendTo(&c.allowedServices))
	fs.StringVar(&c.leaseNamespace, "lease-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the add-on Lease; empty turns the Lease off")
	fs.StringVar(&c.serviceDomain, "service-domain", "svc", "DNS suffix of services after <service>.<namespace>.")
	fs.BoolVar(&c.enableImpersonation, "enable-impersonation", true, "serve hub users, whom the hub's impersonator certificate vouches for, as impersonation; false: only the cluster's own and OIDC tokens")
	fs.StringVar(&c.serviceCAFile, "service-ca-file", "", "PEM CAs the service-proxy trusts for https services besides the system roots; "+
		"re-read when it changes, and may be absent (an optional ConfigMap volume)")
	fs.StringVar(&c.portForward.namespace, "port-forward-namespace", "", "namespace of the proxy-server pods on the hub; set, the "+
		"agent reaches them by port-forward through the hub kube-apiserver (entrypoint PortForward, needs --hub-kubeconfig)")
	fs.StringVar(&c.portForward.selector, "port-forward-selector", "", "label selector of the proxy-server pods")
	fs.IntVar(&c.portForward.port, "port-forward-port", 8091, "agent port of the proxy-server pods")
	c.oidc.bind(fs)
	// -v is also a service-proxy flag (ManagedProxyConfiguration spec.proxyAgent.additionalServiceProxyArgs).
	fs.IntVar(&c.verbosity, "v", 0, "log verbosity (higher logs more), as ANP's -v")
	fs.Func("resolve", "host:port=addr:port, dial addr:port for host:port (like a hostAlias); repeatable", appendTo(&c.resolve))
	fs.IntVar(&c.readBufferSize, "read-buffer-size", agent.DefaultReadBufferSize, "largest read from a destination, in bytes (DATA packets carry at most 32 KiB of it each)")
	// Flags of ANP's proxy-agent that configurations written for the existing addon pass in additionalArgs.
	fs.DurationVar(&c.keepaliveTime, "keepalive-time", 0, "how often to ping the proxy-server on an idle tunnel; 0 for the default")
}

func run(ctx context.Context, c config, log logr.Logger) error {
	for _, f := range []struct{ name, value string }{
		{"--proxy-server-host", c.serverHost}, {"--agent-identifiers", c.identifiers}, {"--cluster-name", c.clusterName},
		{"--agent-id", c.agentID}, {"--ca-cert", c.caCert}, {"--agent-cert", c.agentCert}, {"--agent-key", c.agentKey},
	} {
		if f.value == "" {
			return fmt.Errorf("%s is required", f.name)
		}
	}
	resolver, err := resolve.Parse(c.resolve)
	if err != nil {
		return err
	}
	allowed, err := allowlist.ParseAll(c.allowedServices)
	if err != nil {
		return err
	}
	proxy, err := agent.ProxyFromEnvironment()
	if err != nil {
		return err
	}
	source, err := tlsreload.New(c.agentCert, c.agentKey, c.caCert)
	if err != nil {
		return err
	}
	// The forward proxy's CA verifies the proxy and nothing behind it: whoever holds its key must not pass for the hub.
	// Without one, the proxy is verified with the system roots (nil roots).
	var proxyRoots func() *x509.CertPool
	var proxyTrust *tlsreload.Source
	if c.proxyCACert != "" {
		if proxyTrust, err = tlsreload.New("", "", c.proxyCACert); err != nil {
			return fmt.Errorf("--proxy-ca-cert: %w", err)
		}
		proxyRoots = proxyTrust.CAPool
	}
	checkIdentity(source, c, log)

	kube, err := kubeConfig(c.kubeconfig, resolver)
	if err != nil {
		return err
	}
	kubeAddress, err := agent.KubeAPIServerAddress(kube)
	if err != nil {
		return err
	}
	// The tunnel health port's requests carry no credential: only the CA of the kubeconfig matters.
	kubeTLS, err := rest.TLSConfigFor(&rest.Config{Host: kube.Host, TLSClientConfig: rest.TLSClientConfig{
		Insecure: kube.Insecure, ServerName: kube.ServerName, CAFile: kube.CAFile, CAData: kube.CAData}})
	if err != nil {
		return fmt.Errorf("kube-apiserver TLS: %w", err)
	}

	var services http.Handler
	if c.serviceProxyPort != 0 {
		oidc, err := c.oidc.options()
		if err != nil {
			return err
		}
		if oidc != nil {
			// The issuer is outside the cluster: reached the way the hub is, through the forward proxy.
			oidc.Dial = agent.ForwardProxyDial(proxy, resolver.DialContext, proxyRoots)
		}
		services, err = serviceproxy.New(serviceproxy.Options{
			Kube:                kube,
			RefuseHubIdentities: !c.enableImpersonation,
			Allowed:             allowed,
			DialContext:         resolver.DialContext,
			ServiceDomain:       c.serviceDomain,
			ServiceCAFile:       c.serviceCAFile,
			OIDC:                oidc,
		})
		if err != nil {
			return fmt.Errorf("service-proxy: %w", err)
		}
	}

	var serverDial func(context.Context, string) (net.Conn, error)
	if c.portForward.namespace != "" {
		if c.hubKubeconfig == "" || c.portForward.selector == "" {
			return errors.New("--port-forward-namespace needs --hub-kubeconfig and --port-forward-selector")
		}
		serverDial = (&agent.PortForward{
			Config: func() (*rest.Config, error) {
				cfg, err := hubConfig(c.hubKubeconfig, resolver, proxy, logr.Discard())
				if err == nil && cfg == nil {
					err = fmt.Errorf("no hub kubeconfig at %s yet", c.hubKubeconfig)
				}
				return cfg, err
			},
			Namespace: c.portForward.namespace, Selector: c.portForward.selector, Port: c.portForward.port,
		}).DialContext
	}

	a, err := agent.New(agent.Options{
		ServerAddress:    net.JoinHostPort(c.serverHost, strconv.Itoa(c.serverPort)),
		AgentID:          c.agentID,
		Identifiers:      c.identifiers,
		TLS:              source,
		Proxy:            proxy,
		ProxyRoots:       proxyRoots,
		Dial:             resolver.DialContext,
		ServerDial:       serverDial,
		KubeAPIServer:    kubeAddress,
		KubeAPIServerTLS: kubeTLS,
		ServiceProxy:     services,
		ServiceProxyPort: c.serviceProxyPort,
		// The hub's impersonator proves itself with its certificate; the agent's own one answers it.
		ServiceProxyTLS: serviceproxy.ServerTLSConfig(source.Certificate, source.CAPool),
		ReadBufferSize:  c.readBufferSize,
		KeepaliveTime:   c.keepaliveTime,
		Log:             log.WithName("tunnel"),
	})
	if err != nil {
		return err
	}

	health := &http.Server{
		Addr:              net.JoinHostPort(c.healthBindAddress, strconv.Itoa(c.healthPort)),
		Handler:           a.HealthHandler(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	listener, err := net.Listen("tcp", health.Addr)
	if err != nil {
		return fmt.Errorf("health server: %w", err)
	}
	go func() {
		if err := health.Serve(listener); !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "The health server stopped")
		}
	}()
	defer func() { _ = health.Close() }()

	go source.Run(ctx, certReloadInterval, log.WithName("certificates"))
	if proxyTrust != nil {
		go proxyTrust.Run(ctx, certReloadInterval, log.WithName("proxy-ca"))
	}

	if c.leaseNamespace == "" {
		log.Info("No lease namespace (--lease-namespace or POD_NAMESPACE): the add-on Lease is not renewed")
	} else {
		client, err := kubernetes.NewForConfig(kube)
		if err != nil {
			return fmt.Errorf("managed cluster client: %w", err)
		}
		renewer := &agent.LeaseRenewer{
			Client: client, Namespace: c.leaseNamespace, Name: proxyv1alpha1.AddonName, Holder: c.agentID,
			Connected: a.Connected, Log: log.WithName("lease"),
		}
		go renewer.Run(ctx)
	}

	log.Info("Starting the proxy-agent", "cluster", c.clusterName, "agentID", c.agentID,
		"proxyServer", net.JoinHostPort(c.serverHost, strconv.Itoa(c.serverPort)), "kubeAPIServer", kubeAddress,
		"forwardProxy", proxy != nil, "serviceProxyPort", c.serviceProxyPort, "allowedServices", len(allowed),
		"serviceCAFile", c.serviceCAFile, "portForwardNamespace", c.portForward.namespace)
	err = a.Run(ctx)
	log.Info("Stopped")
	return err
}

// kubeConfig is the managed cluster's kube-apiserver as the agent reaches it: directly (never through the forward
// proxy) and with --resolve applied.
func kubeConfig(kubeconfig string, resolver resolve.Resolver) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("managed cluster configuration: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.Dial = resolver.DialContext
	cfg.UserAgent = "cluster-proxy-agent"
	return cfg, nil
}

// hubConfig reads the add-on's hub kubeconfig, nil while there is none. The hub is reached like the proxy-server,
// through proxy (agent.ProxyFromEnvironment; nil dials directly) unless the kubeconfig names its own proxy-url, and
// with --resolve applied.
func hubConfig(path string, resolver resolve.Resolver, proxy func(*url.URL) (*url.URL, error), log logr.Logger) (*rest.Config, error) {
	if path == "" {
		return nil, nil
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		log.Info("No hub kubeconfig yet", "path", path)
		return nil, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("hub kubeconfig %s: %w", path, err)
	}
	if cfg.Proxy == nil {
		// Not client-go's default, http.ProxyFromEnvironment: it ignores HTTP_PROXY for https and never proxies
		// loopback, so the hub would be reached another way than the tunnel.
		cfg.Proxy = func(req *http.Request) (*url.URL, error) {
			if proxy == nil {
				return nil, nil
			}
			return proxy(req.URL)
		}
	}
	cfg.Dial = resolver.DialContext
	return cfg, nil
}

// checkIdentity warns when the certificate does not name --cluster-name, or the identifiers are not the ones the
// certificate backs: the proxy-server would then refuse the agent, and the reason is easier to see here.
func checkIdentity(source *tlsreload.Source, c config, log logr.Logger) {
	cert := source.Certificate()
	if cert == nil || cert.Leaf == nil {
		return
	}
	for _, problem := range identityProblems(cert.Leaf.Subject, c.clusterName, c.identifiers) {
		log.Info("The proxy-server will refuse this agent", "problem", problem,
			"commonName", cert.Leaf.Subject.CommonName, "cluster", c.clusterName, "identifiers", c.identifiers)
	}
}

// identityProblems checks the agent certificate's subject and identifiers as the proxy-server does
// (contract.CheckAgentIdentifiers), and that the certificate is for cluster.
func identityProblems(subject pkix.Name, cluster, identifiers string) []string {
	certCluster, ok := contract.ClusterOfAgentCommonName(subject.CommonName)
	if !ok {
		return []string{"the certificate is not an agent certificate"}
	}
	var problems []string
	if certCluster != cluster {
		problems = append(problems, "the certificate is for cluster "+certCluster)
	}
	namespace, _ := contract.AgentNamespaceOfUnits(subject.OrganizationalUnit)
	if _, err := contract.CheckAgentIdentifiers(certCluster, namespace, identifiers); err != nil {
		problems = append(problems, "the identifiers do not match the certificate: "+err.Error())
	}
	return problems
}
