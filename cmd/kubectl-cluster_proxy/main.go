// Command kubectl-cluster_proxy is a kubectl plugin for cluster-proxy on an OCM hub:
//
//	kubectl cluster-proxy health                 probe every managed cluster through its tunnel now
//	kubectl cluster-proxy kubeconfig <cluster>   a kubeconfig that reaches the cluster through the user-server
//	kubectl-cluster_proxy credential             an exec credential plugin for the user-server (ClusterProfile)
//	kubectl cluster-proxy sessions list|play     the recorded exec and attach sessions, and their replay
//
// It reads the hub with the current kubeconfig (--kubeconfig, --context). The proxy-server and user-server are
// in-cluster Services; from outside the hub cluster, point their names at a port-forward with --resolve.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

const usage = `Usage:
  kubectl cluster-proxy health [flags]
      Probe every managed cluster: CLUSTER NAME, INSTALLED, AVAILABLE, PROBED HEALTH (GET /healthz through the
      tunnel, now) and LATENCY.
  kubectl cluster-proxy kubeconfig <cluster> [-o file] [--token token] [--user-server-url url] [flags]
      Write a kubeconfig whose server is the user-server URL of <cluster>, trusting the hub's proxy CA.
  kubectl cluster-proxy kubeconfig <cluster> --via-hub [-o file] [flags]
      Write a context <cluster>-via-hub on the hub's own server (/apis/gateway.proxy.open-cluster-management.io/
      v1alpha1/clusters/<cluster>/proxy) with the current hub user: no new credential, the hub's RBAC per cluster.
  kubectl-cluster_proxy credential [--token token | --token-file file] [flags]
      An exec credential plugin (client.authentication.k8s.io v1 and v1beta1) for the user-server: name it in a
      kubeconfig's exec or in the provider file of a ClusterProfile consumer (provider open-cluster-management).
  kubectl cluster-proxy sessions list --dir <dir> [--cluster cluster] [--user user]
      List the recorded exec and attach sessions under <dir>, laid out as the proxy-server writes them
      (<dir>/<cluster>/<YYYY-MM-DD>/<session>.cast): SESSION, CLUSTER, USER, NAMESPACE, POD, CONTAINER, COMMAND,
      STARTED and DURATION.
  kubectl cluster-proxy sessions play <file|session> [--dir dir] [--speed 1] [--max-idle duration]
      Replay a recording's output on stdout: --speed 2 twice as fast, 0 all at once; --max-idle caps its pauses.

Flags for every command:
`

// errUsage marks a command line that cannot be run; the exit code is 2.
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, args, stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return 2
	default:
		_, _ = fmt.Fprintln(stderr, "error:", err)
		return 1
	}
}

// globals are the flags of every command.
type globals struct {
	kubeconfig, context, configuration string
	resolve                            []string
}

// register adds the flags with the values already parsed as defaults, so they may come before or after the
// command.
func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "the hub's kubeconfig (default $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&g.context, "context", g.context, "the kubeconfig context of the hub (default the current one)")
	fs.StringVar(&g.configuration, "configuration", g.configuration, "the ManagedProxyConfiguration")
	fs.Func("resolve", "host:port=addr:port, dial addr:port for host:port, e.g. "+
		"proxy-entrypoint.<ns>.svc:8090=127.0.0.1:8090 for a port-forward; repeatable",
		func(v string) error { g.resolve = append(g.resolve, v); return nil })
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	g := globals{configuration: proxyv1alpha1.DefaultConfigurationName}
	fs := newFlagSet("kubectl-cluster_proxy", stderr, &g)
	if err := fs.Parse(args); err != nil { // up to the command
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	remaining := fs.Args()
	if len(remaining) == 0 {
		fs.Usage()
		return fmt.Errorf("%w: a command is required: health, kubeconfig, credential or sessions", errUsage)
	}
	command, rest := remaining[0], remaining[1:]
	switch command {
	case "health":
		h := healthCommand{globals: g}
		if err := commandLine(command, stderr, &h.globals, h.register, rest, "no arguments"); err != nil {
			return err
		}
		return h.run(ctx, stdout, stderr)
	case "kubeconfig":
		k := kubeconfigCommand{globals: g}
		if err := commandLine(command, stderr, &k.globals, k.register, rest, "one managed cluster name", &k.cluster); err != nil {
			return err
		}
		return k.run(ctx, stdout)
	case "credential":
		c := credentialCommand{globals: g}
		if err := commandLine(command, stderr, &c.globals, c.register, rest, "no arguments"); err != nil {
			return err
		}
		return c.run(stdout)
	case "sessions":
		return runSessions(ctx, g, rest, stdout, stderr)
	default:
		fs.Usage()
		return fmt.Errorf("%w: unknown command %q: want health, kubeconfig, credential or sessions", errUsage, command)
	}
}

// commandLine parses command's flags, and the global ones, anywhere in args, as kubectl does; it wants exactly
// len(into) positional arguments (what says which) and stores them in into.
func commandLine(command string, stderr io.Writer, g *globals, register func(*flag.FlagSet), args []string, what string, into ...*string) error {
	fs := newFlagSet(command, stderr, g)
	register(fs)
	positional, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != len(into) {
		return fmt.Errorf("%w: %s takes %s, got %q", errUsage, command, what, positional)
	}
	for i, p := range into {
		*p = positional[i]
	}
	return nil
}

func newFlagSet(name string, stderr io.Writer, g *globals) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	g.register(fs)
	return fs
}

// parse parses flags anywhere among the arguments, as kubectl does, and returns the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// hub is the hub API as the plugin reads it.
type hub struct {
	config *rest.Config
	client client.Client
}

// hubClientConfig is the hub kubeconfig: --kubeconfig, $KUBECONFIG, ~/.kube/config, with --context.
func (g *globals) hubClientConfig() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.context})
}

// hubConfig loads the hub's rest.Config: --kubeconfig, $KUBECONFIG, ~/.kube/config, else the pod's service account.
func (g *globals) hubConfig() (*rest.Config, error) {
	cfg, err := g.hubClientConfig().ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load the hub kubeconfig: %w", err)
	}
	return cfg, nil
}

// rawHubConfig is the hub kubeconfig as its files say (paths made absolute), for writing contexts from it.
func (g *globals) rawHubConfig() (*clientcmdapi.Config, error) {
	raw, err := g.hubClientConfig().RawConfig()
	if err != nil {
		return nil, fmt.Errorf("load the hub kubeconfig: %w", err)
	}
	if len(raw.Contexts) == 0 {
		return nil, errors.New("--via-hub needs a hub kubeconfig with a context (--kubeconfig, $KUBECONFIG or ~/.kube/config)")
	}
	return &raw, nil
}

func (g *globals) hub() (*hub, error) {
	cfg, err := g.hubConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 30 * time.Second
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, proxyv1alpha1.AddToScheme, clusterv1.Install, addonv1alpha1.Install} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, hubError(cfg, err)
	}
	return &hub{config: cfg, client: c}, nil
}

// hubError names the hub in err, and says when it could not be reached at all.
func hubError(cfg *rest.Config, err error) error {
	var status apierrors.APIStatus
	var urlErr *url.Error
	var netErr net.Error
	switch {
	case errors.As(err, &status):
		return fmt.Errorf("hub at %s: %w", cfg.Host, err)
	case errors.As(err, &urlErr), errors.As(err, &netErr):
		return fmt.Errorf("cannot reach the hub at %s: %w", cfg.Host, err)
	default:
		return err
	}
}

// proxies reads the configuration and the proxy-client credentials.
func (h *hub) proxies(ctx context.Context, g *globals) (*clusterproxy.Client, error) {
	resolve, err := clusterproxy.ParseResolve(g.resolve)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	c, err := clusterproxy.New(ctx, nil, clusterproxy.Options{Configuration: g.configuration, Resolve: resolve,
		Reader: h.client, CredentialsTTL: clusterproxy.DefaultCredentialsTTL})
	if errors.Is(err, clusterproxy.ErrNoConfiguration) {
		return nil, h.noConfiguration(g.configuration)
	}
	if err != nil {
		return nil, hubError(h.config, err)
	}
	return c, nil
}

func (h *hub) noConfiguration(name string) error {
	return fmt.Errorf("no ManagedProxyConfiguration %q on the hub at %s: install cluster-proxy-operator and create it "+
		"(kubectl get managedproxyconfigurations), or name another with --configuration", name, h.config.Host)
}
