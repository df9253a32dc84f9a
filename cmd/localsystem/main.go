// Command localsystem runs the whole product locally ('make run'): a hub and two managed clusters joined through
// the real OCM controllers and klusterlet agents, the operator's manager, the proxy-server and proxy-agents started
// from the Deployments it renders, and squid as the forward proxy of cluster1 (over TLS). When every tunnel is
// Available it prints the health table and ready-to-paste commands, then stays up until Ctrl-C. The logic lives in
// internal/system.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/system"
)

func main() {
	var workDir string
	var exitWhenReady bool
	binaries := system.DefaultBinaries()
	flag.StringVar(&workDir, "workdir", "", "folder for kubeconfigs, certificates and logs, kept at exit (default: a new temporary folder, removed at exit)")
	flag.BoolVar(&exitWhenReady, "exit-when-ready", false, "stop and exit 0 once every tunnel is Available, after the summary")
	flag.StringVar(&binaries.OCMLocal, "ocm-local", binaries.OCMLocal, "the ocm-local binary ('make ocm-local')")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "localsystem: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard))) // envtest logs through controller-runtime; progress is printed

	removeWorkDir := workDir == ""
	if removeWorkDir {
		var err error
		if workDir, err = os.MkdirTemp("", "cluster-proxy-local-"); err != nil {
			fmt.Fprintln(os.Stderr, "localsystem:", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, workDir, binaries, exitWhenReady)
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

func run(ctx context.Context, workDir string, binaries system.Binaries, exitWhenReady bool) (err error) {
	start := time.Now()
	fmt.Printf("==> starting the local system in %s (a few minutes the first time)\n", workDir)
	sys, err := system.Start(ctx, system.Options{WorkDir: workDir, Binaries: binaries, Log: os.Stdout})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("==> stopping every process")
		err = errors.Join(err, sys.Stop())
	}()
	fmt.Printf("==> every cluster's tunnel is Available after %s\n\n", time.Since(start).Round(time.Second))
	if err := summary(ctx, sys, workDir, binaries); err != nil {
		return err
	}
	if exitWhenReady {
		return nil
	}
	fmt.Println("\nUp until Ctrl-C.")
	return watch(ctx, sys)
}

// watch returns nil at Ctrl-C, or the error of a process of the system that died, which leaves it unusable.
func watch(ctx context.Context, sys *system.System) error {
	ticker := time.NewTicker(time.Second) // the processes offer no one channel to wait on; a second is soon enough
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			if err := sys.Err(); err != nil {
				return err
			}
		}
	}
}

// summary prints the health table and commands a user can paste.
func summary(ctx context.Context, sys *system.System, workDir string, binaries system.Binaries) error {
	bin := filepath.Dir(binaries.Manager)
	pluginArgs := []string{"--kubeconfig", sys.Env.HubKubeconfig}
	for _, r := range sys.Resolve {
		pluginArgs = append(pluginArgs, "--resolve", r)
	}
	health, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl-cluster_proxy"), append(pluginArgs, "health")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl-cluster_proxy health: %w: %s", err, health)
	}
	fmt.Println(string(health))

	fmt.Println("The hub:")
	fmt.Printf("  export KUBECONFIG=%s\n", sys.Env.HubKubeconfig)
	fmt.Println("  kubectl get managedclusters,clusterproxystatuses -A")
	fmt.Println("  kubectl get managedproxyconfiguration cluster-proxy -o yaml")
	fmt.Printf("  %s %s health\n\n", filepath.Join(bin, "kubectl-cluster_proxy"), strings.Join(pluginArgs, " "))

	fmt.Println("Each managed cluster through the user-server (a cluster-admin ServiceAccount token of that cluster):")
	for _, c := range sys.Env.Clusters {
		token, err := adminToken(ctx, c.Config)
		if err != nil {
			return err
		}
		path := filepath.Join(workDir, c.Name+".user-server.kubeconfig")
		out, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl-cluster_proxy"),
			append(pluginArgs, "kubeconfig", c.Name, "-o", path, "--token", token)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("kubectl-cluster_proxy kubeconfig %s: %w: %s", c.Name, err, out)
		}
		fmt.Printf("  kubectl --kubeconfig %s get namespaces\n", path)
	}

	cert, key, ca, err := hubClientFiles(ctx, sys, workDir)
	if err != nil {
		return err
	}
	fmt.Println("\nA managed kube-apiserver through the HTTP-CONNECT frontend (mTLS with the proxy-client certificate):")
	fmt.Printf("  curl --proxytunnel -x https://127.0.0.1:%d --proxy-cacert %s --proxy-cert %s --proxy-key %s -k https://%s:443/healthz\n",
		sys.Ports.HTTPConnect, ca, cert, key, system.DigitCluster)
	fmt.Printf("\n%s reaches the hub only through squid over TLS, %s (its CA: %s), klusterlet and proxy-agent alike;\n",
		system.ProxiedCluster, sys.Squid.TLSURL(), sys.Squid.CAFile())
	fmt.Printf("squid logs each CONNECT when the tunnel closes: %s\n", sys.Squid.AccessLog())
	fmt.Printf("\nThe manager runs as deployed, as its ServiceAccount in %s with the RBAC of config/rbac: %s\n",
		system.Namespace, sys.ManagerKubeconfig)
	fmt.Printf("\nLogs: %s (manager.log, pods/, clusters/logs/, squid/)\n", workDir)
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
	return testenv.ServiceAccountToken(ctx, cs, "default", "local-admin", 24*time.Hour)
}

// hubClientFiles writes the proxy-client pair and the CA bundle from the hub for curl.
func hubClientFiles(ctx context.Context, sys *system.System, workDir string) (cert, key, ca string, err error) {
	dir := filepath.Join(workDir, "hub-client")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", err
	}
	pair, bundle := &corev1.Secret{}, &corev1.Secret{}
	mpc := sys.Configuration()
	ns := render.Namespace(mpc)
	if err := sys.HubClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.SecretNamesOf(mpc).ProxyClient}, pair); err != nil {
		return "", "", "", err
	}
	if err := sys.HubClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: proxyv1alpha1.CABundleSecretName}, bundle); err != nil {
		return "", "", "", err
	}
	cert, key, ca = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	for path, data := range map[string][]byte{cert: pair.Data["tls.crt"], key: pair.Data["tls.key"], ca: bundle.Data["ca.crt"]} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return cert, key, ca, nil
}
