// Command localsystem runs the whole product on real Kubernetes clusters of this machine ('make run'): a hub and two
// managed clusters whose pods run, OCM's hub controllers and klusterlets as pods, the operator installed by the
// README's helm install from the image of 'make image' with three proxy-server replicas, and squid as cluster1's
// only route to the hub (over TLS). When every tunnel is Available it prints the health table and ready-to-paste
// commands, then stays up until Ctrl-C, SIGTERM, or the close of the pipe its output goes to; then it stops and
// removes everything (processes, mounts, network namespaces, routes, cgroups). The logic lives in
// internal/localsystem.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// firstIndex is the hub's cluster index of 'make run'; the test suites use others, so both can share a machine.
const firstIndex = 1

func main() {
	var workDir string
	var exitWhenReady bool
	flag.StringVar(&workDir, "workdir", "", "folder for the clusters, kubeconfigs, certificates and logs, kept at exit (default: a new temporary folder, removed at exit)")
	flag.BoolVar(&exitWhenReady, "exit-when-ready", false, "stop, remove everything and exit 0 once every tunnel is Available, after the summary")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "localsystem: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	// The clients log through controller-runtime and klog (a port-forward's closed stream); progress is printed.
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	removeWorkDir := workDir == ""
	if removeWorkDir {
		var err error
		if workDir, err = os.MkdirTemp("", "cluster-proxy-local-"); err != nil {
			fmt.Fprintln(os.Stderr, "localsystem:", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancelCause(ctx)
	stopWhenReaderLeaves(cancel)
	err := run(ctx, workDir, exitWhenReady)
	stop()
	if removeWorkDir {
		_ = os.RemoveAll(workDir)
	}
	if err == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "localsystem: %v\n", err)
	if errors.Is(err, context.Canceled) {
		os.Exit(130)
	}
	os.Exit(1)
}

// errReaderLeft ends the run when the pipe stdout writes to has no reader any more.
var errReaderLeft = errors.New("the reader of the output went away")

// stopWhenReaderLeaves cancels the run when stdout is a pipe and its reader closes it ('make run | head'): writes to
// it then fail instead of killing the program (SIGPIPE), so the system is stopped and removed as at Ctrl-C.
func stopWhenReaderLeaves(cancel context.CancelCauseFunc) {
	var st unix.Stat_t
	if unix.Fstat(1, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return
	}
	signal.Ignore(syscall.SIGPIPE)
	go func() {
		fds := []unix.PollFd{{Fd: 1}}
		for {
			// A pipe's write end reports POLLERR once no reader is left; nothing else is asked for.
			if _, err := unix.Poll(fds, -1); err == nil && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				cancel(errReaderLeft)
				return
			} else if err != nil && !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
}

func run(ctx context.Context, workDir string, exitWhenReady bool) (err error) {
	start := time.Now()
	fmt.Printf("==> starting the local system on real clusters in %s (minutes the first time)\n", workDir)
	opts := localsystem.DefaultOptions(workDir, firstIndex)
	opts.Log = os.Stdout
	sys, err := localsystem.Start(ctx, opts)
	if err != nil {
		return cause(ctx, err)
	}
	defer func() {
		fmt.Println("==> stopping and removing the clusters, squid and the forwarders")
		err = errors.Join(err, sys.Stop())
		if left := sys.Leftovers(); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("left on the machine: %s", strings.Join(left, "; ")))
		}
	}()
	fmt.Printf("==> every cluster's tunnel is Available after %s\n\n", time.Since(start).Round(time.Second))
	if err := summary(ctx, sys, workDir, opts.NodeAssets); err != nil {
		return cause(ctx, err)
	}
	if exitWhenReady {
		return nil
	}
	fmt.Println("\nUp until Ctrl-C.")
	<-ctx.Done() // Ctrl-C, SIGTERM or the reader gone: a normal end
	return nil
}

// cause is err, or why ctx ended when it did.
func cause(ctx context.Context, err error) error {
	if c := context.Cause(ctx); c != nil {
		return fmt.Errorf("%w (%w)", err, c)
	}
	return err
}

// summary prints the health table and commands a user can paste.
func summary(ctx context.Context, sys *localsystem.System, workDir, nodeAssets string) error {
	plugin := filepath.Join(repo.Root(), "bin", "kubectl-cluster_proxy")
	pluginArgs := []string{"--kubeconfig", sys.Hub.Kubeconfig}
	for _, r := range sys.Resolve() {
		pluginArgs = append(pluginArgs, "--resolve", r)
	}
	health, err := exec.CommandContext(ctx, plugin, append(pluginArgs, "health")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl-cluster_proxy health: %w: %s", err, health)
	}
	fmt.Println(string(health))

	fmt.Println("The hub (kubectl of the node binaries):")
	fmt.Printf("  export KUBECONFIG=%s PATH=%s:$PATH\n", sys.Hub.Kubeconfig, nodeAssets)
	fmt.Println("  kubectl -n " + localsystem.Namespace + " get deploy,pods")
	fmt.Println("  kubectl get managedclusters,clusterproxystatuses -A")
	fmt.Println("  kubectl get managedproxyconfiguration cluster-proxy -o yaml")
	fmt.Printf("  %s %s health\n\n", plugin, strings.Join(pluginArgs, " "))

	fmt.Println("Each managed cluster through the user-server (a cluster-admin ServiceAccount token of that cluster):")
	for _, c := range sys.Managed {
		token, err := adminToken(ctx, c.Config)
		if err != nil {
			return err
		}
		path := filepath.Join(workDir, c.Name()+".user-server.kubeconfig")
		out, err := exec.CommandContext(ctx, plugin, append(pluginArgs, "kubeconfig", c.Name(), "-o", path, "--token", token)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl-cluster_proxy kubeconfig %s: %w: %s", c.Name(), err, out)
		}
		fmt.Printf("  kubectl --kubeconfig %s get pods -A\n", path)
	}
	fmt.Println("Each managed cluster directly (its admin kubeconfig):")
	for _, c := range sys.Managed {
		fmt.Printf("  kubectl --kubeconfig %s get pods -A\n", c.Kubeconfig)
	}

	cert, key, ca, err := sys.HubClientFiles(ctx, filepath.Join(workDir, "hub-client"))
	if err != nil {
		return err
	}
	proxy := fmt.Sprintf("proxy-entrypoint.%s.svc:%d", localsystem.Namespace, localsystem.HTTPConnectNodePort)
	fmt.Println("\nA managed kube-apiserver through the HTTP-CONNECT frontend (mTLS with the proxy-client certificate):")
	fmt.Printf("  curl --proxytunnel --resolve %s:%s -x https://%s --proxy-cacert %s --proxy-cert %s --proxy-key %s -k https://%s:443/healthz\n",
		proxy, sys.Hub.NodeIP, proxy, ca, cert, key, localsystem.DigitCluster)
	fmt.Printf("\n%s reaches the hub only through squid over TLS, %s (its CA: %s), klusterlet and proxy-agent alike;\n",
		localsystem.ProxiedCluster, sys.Squid.TLSURL(), sys.Squid.CAFile())
	fmt.Printf("squid logs each CONNECT when the tunnel closes: %s\n", sys.Squid.AccessLog())
	if m, err := sys.Memory(); err == nil {
		fmt.Printf("\nThe three clusters hold %d MiB of memory (%d MiB resident, the rest page cache).\n", m.Usage>>20, m.RSS>>20)
	}
	fmt.Printf("\nLogs: %s (clusters/<name>/ holds each node's daemons and pods)\n", workDir)
	return nil
}

// adminToken is a token of a cluster-admin ServiceAccount (default/local-admin) of a managed cluster.
func adminToken(ctx context.Context, cfg *rest.Config) (string, error) {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return "", err
	}
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "local-admin"}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "local-admin"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "local-admin"}}},
	} {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	return kubeclient.ServiceAccountToken(ctx, cs, "default", "local-admin", 24*time.Hour)
}
