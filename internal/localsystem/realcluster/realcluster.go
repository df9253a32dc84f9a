// Package realcluster starts and stops real single-node Kubernetes clusters on this machine, whose pods run as
// containers: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy built from Go
// modules ('make node-assets'), containerd, runc and the CNI plugins from Debian, CoreDNS as a pod.
//
// Each cluster lives in a network namespace of its own, joined to the machine by one veth pair: the node is
// 100.66.<index>.2, the machine's side 100.66.<index>.1. The namespace has no default route and the machine does not
// forward, so nothing leaves the machine and two clusters reach each other only through a program on the machine
// that listens on one side and dials the other (a forward proxy). Pods are masqueraded to the node's address inside
// the namespace, so they too can reach the machine's side. Every cluster uses the same pod (100.64.0.0/24) and
// service (100.65.0.0/16) ranges without collision. CutNetwork (network.go) takes a cluster off the network for a
// while, and then restores its network as it was.
//
// The daemons of a node run in a private mount namespace that covers /run, /var/lib and /var/log with the cluster's
// own folders, so nothing they write leaks onto the machine. Stop leaves nothing behind (processes, mounts,
// namespaces, veths, routes, cgroups, iptables rules); Start first ends what a killed run left (CleanStale).
// real-nodes.md in the shared notes has the facts this rests on.
package realcluster

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

//go:embed node.sh
var nodeScript []byte

const (
	// PodCIDR and ServiceCIDR are every cluster's ranges; they never leave the cluster's namespace.
	PodCIDR     = "100.64.0.0/24"
	ServiceCIDR = "100.65.0.0/16"
	// DNSServiceIP is the ClusterIP of kube-dns.
	DNSServiceIP = "100.65.0.10"
	// APIServerPort is where each kube-apiserver listens on its node's address.
	APIServerPort = 6443

	podGateway = "100.64.0.1"
	// prefix names every network namespace, veth and cgroup this package makes, so a later run finds them.
	prefix = "cpo-"
)

// Options describe one cluster.
type Options struct {
	// Name is the cluster's and its node's name.
	Name string
	// Index (1–254) picks the cluster's addresses, 100.66.<Index>.0/24, and names its namespace cpo-<Index>.
	Index int
	// Dir is the cluster's work folder; Stop removes it unless KeepDir.
	Dir     string
	KeepDir bool
	// Binaries is the folder 'make node-assets' prints: etcd, the Kubernetes commands, coredns.
	Binaries string
	// Pause is the static pause program (bin/pause) that every pod's sandbox runs.
	Pause string
	// Images are image archives (docker-archive or OCI tarballs) loaded into the node before it reports ready.
	Images []string
	// APIServerSANs are further names and addresses the kube-apiserver's certificate holds.
	APIServerSANs []string
	// CoreDNSHosts are extra name → address entries CoreDNS answers (its hosts plugin), e.g. a hub's name.
	CoreDNSHosts map[string]string
	// PlainHTTPRegistries are registries (host:port) the node's containerd pulls from over plain HTTP, as a cluster
	// with an insecure registry mirror configured does.
	PlainHTTPRegistries []string
	// RegistryMirrors map a registry host that images name (quay.io) to a registry (host:port) the node's containerd
	// pulls that host's images from instead, over plain HTTP, as a cluster with a registry mirror does; the named host
	// itself is never asked.
	RegistryMirrors map[string]string
	// ServiceAccountIssuer is the issuer of the ServiceAccount tokens the kube-apiserver signs, and the URL of its
	// OpenID discovery; empty: DefaultServiceAccountIssuer. Tokens of the default issuer are still accepted.
	ServiceAccountIssuer string
}

// DefaultServiceAccountIssuer is the kube-apiserver's ServiceAccount token issuer unless
// Options.ServiceAccountIssuer names another.
const DefaultServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Cluster is a running cluster.
type Cluster struct {
	opts Options
	// NodeIP is the node's address; HostIP the machine's end of the veth.
	NodeIP, HostIP net.IP
	// Kubeconfig is a cluster-admin kubeconfig for https://NodeIP:6443.
	Kubeconfig string
	// Config is the same, for clients in this process.
	Config *rest.Config

	// name names the cluster's network namespace, its machine-side veth and its cgroups: cpo-<Index>.
	name string
	node *exec.Cmd
	done chan struct{}
	ca   *certs.KeyPair
	// logsKept closes when keepPodLogs has returned.
	logsKept chan struct{}
}

// Name is the cluster's name.
func (c *Cluster) Name() string { return c.opts.Name }

// Dir is the cluster's work folder: logs/ holds every daemon's log, pod-logs/ every container's (PodLogs).
func (c *Cluster) Dir() string { return c.opts.Dir }

// AuditLog is the kube-apiserver's audit log (JSON lines, Metadata level, the components' own requests left out).
func (c *Cluster) AuditLog() string { return filepath.Join(c.opts.Dir, "logs", "audit.log") }

// NetNS is the path of the cluster's network namespace, for nsenter --net.
func (c *Cluster) NetNS() string { return "/run/netns/" + c.name }

// APIServer is the kube-apiserver's URL.
func (c *Cluster) APIServer() string {
	return "https://" + net.JoinHostPort(c.NodeIP.String(), strconv.Itoa(APIServerPort))
}

// CA is the PEM of the cluster's CA: it signs the kube-apiserver's certificate and every client certificate.
func (c *Cluster) CA() []byte { return c.ca.CertPEM }

// HostIP is the machine's end of the veth of the cluster of index: its address while that cluster runs.
func HostIP(index int) net.IP { return net.IPv4(100, 66, byte(index), 1).To4() }

// Start brings a cluster up and returns once its node is Ready, its images are loaded and CoreDNS answers. A cluster
// that fails to start is stopped and removed before Start returns.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Index < 1 || opts.Index > 254 {
		return nil, fmt.Errorf("cluster %s: index %d is not in 1..254", opts.Name, opts.Index)
	}
	c := &Cluster{
		opts:   opts,
		NodeIP: net.IPv4(100, 66, byte(opts.Index), 2).To4(),
		HostIP: HostIP(opts.Index),
		name:   prefix + strconv.Itoa(opts.Index),
		done:   make(chan struct{}),
	}
	if err := c.start(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("start cluster %s: %w", opts.Name, err), c.Stop())
	}
	return c, nil
}

// claim removes what is stale, gives the machine's inotify limits room for another node, and records this process as
// the cluster's owner, in one hold of the machine lock: a run starting beside this one finds the cluster owned from
// its first trace on.
func (c *Cluster) claim() error {
	unlock, err := lockMachine()
	if err != nil {
		return err
	}
	defer unlock()
	if err := cleanStaleLocked(c.opts.Index); err != nil {
		return err
	}
	if err := raiseInotifyLimits(inotifyDir); err != nil {
		return err
	}
	return writeOwner(c.name)
}

func (c *Cluster) start(ctx context.Context) error {
	for _, d := range []string{"config", "pki", "logs", "etcd", "cni/net.d", "cni/ipam", "root/run/containerd"} {
		if err := os.MkdirAll(filepath.Join(c.opts.Dir, d), 0o700); err != nil {
			return err
		}
	}
	if err := c.claim(); err != nil {
		return err
	}
	if err := os.Symlink(filepath.Join(c.opts.Dir, "root", "run", "containerd", "containerd.sock"), c.containerdSocket()); err != nil {
		return err
	}
	var err error
	if c.ca, err = c.issueCertificates(); err != nil {
		return err
	}
	if err := c.writeConfig(); err != nil {
		return err
	}
	if err := c.createNetwork(); err != nil {
		return err
	}
	if err := createCgroups(c.name); err != nil {
		return err
	}
	if err := c.startNode(); err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx, cs); err != nil {
		return err
	}
	if err := c.loadImages(ctx); err != nil {
		return err
	}
	if err := c.deployCoreDNS(ctx); err != nil {
		return err
	}
	return c.waitReady(ctx, cs)
}

// createNetwork makes the guard route, then the namespace and its veth pair.
func (c *Cluster) createNetwork() error {
	if err := guardRoute("replace"); err != nil {
		return err
	}
	return c.createVethPair()
}

// createVethPair makes the cluster's network namespace and the veth pair that joins it to the machine: the machine's
// end named after the namespace, with HostIP/24, the node's end eth0 in the namespace, with NodeIP/24.
func (c *Cluster) createVethPair() error {
	host, node := c.name, c.name+"n"
	steps := [][]string{
		{"netns", "add", c.name},
		{"link", "add", host, "type", "veth", "peer", "name", node},
		{"link", "set", node, "netns", c.name},
		{"addr", "add", c.HostIP.String() + "/24", "dev", host},
		{"link", "set", host, "up"},
		{"-n", c.name, "link", "set", node, "name", "eth0"},
		{"-n", c.name, "addr", "add", c.NodeIP.String() + "/24", "dev", "eth0"},
		{"-n", c.name, "link", "set", "eth0", "up"},
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %w: %s", args, err, out)
		}
	}
	return nil
}

// startNode runs node.sh in the cluster's network namespace and a private mount namespace.
func (c *Cluster) startNode() error {
	script := filepath.Join(c.opts.Dir, "node.sh")
	if err := os.WriteFile(script, nodeScript, 0o700); err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(c.opts.Dir, "logs", "node.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", "--net="+c.NetNS(), "--",
		"unshare", "--mount", "--propagation", "private", "--", "bash", script)
	cmd.Env = append(os.Environ(),
		"DIR="+c.opts.Dir, "BIN="+c.opts.Binaries, "CGROUP="+c.name, "OWNER="+strconv.Itoa(os.Getpid()),
		"NODE_NAME="+c.opts.Name, "NODE_IP="+c.NodeIP.String(), "SERVICE_CIDR="+ServiceCIDR, "POD_GATEWAY="+podGateway,
		"SA_ISSUER="+cmp.Or(c.opts.ServiceAccountIssuer, DefaultServiceAccountIssuer))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a terminal's Ctrl-C reaches only us, and Stop ends the node in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start the node: %w", err)
	}
	c.node = cmd
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	c.logsKept = make(chan struct{})
	go func() {
		defer close(c.logsKept)
		c.keepPodLogs(time.Second)
	}()
	return nil
}

// waitAPIServer waits for /readyz, then for the default ServiceAccount a pod needs.
func (c *Cluster) waitAPIServer(ctx context.Context, cs kubernetes.Interface) error {
	return c.poll(ctx, 2*time.Minute, "the kube-apiserver to be ready", func(ctx context.Context) (bool, error) {
		if err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
			return false, nil
		}
		_, err := cs.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

// waitReady waits for the node to be Ready and CoreDNS to be available.
func (c *Cluster) waitReady(ctx context.Context, cs kubernetes.Interface) error {
	return c.poll(ctx, 3*time.Minute, "the node to be Ready and CoreDNS available", func(ctx context.Context) (bool, error) {
		node, err := cs.CoreV1().Nodes().Get(ctx, c.opts.Name, metav1.GetOptions{})
		if err != nil || !nodeReady(node) {
			return false, nil
		}
		dns, err := cs.AppsV1().Deployments(metav1.NamespaceSystem).Get(ctx, "coredns", metav1.GetOptions{})
		return err == nil && dns.Status.AvailableReplicas > 0, nil
	})
}

// poll runs cond every 250ms until it holds, the node supervisor ends, or timeout; the error names what it waited for
// and where the logs are.
func (c *Cluster) poll(ctx context.Context, timeout time.Duration, what string, cond wait.ConditionWithContextFunc) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-c.done:
			return false, errors.New("the node supervisor ended")
		default:
		}
		return cond(ctx)
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w (logs: %s)", what, err, filepath.Join(c.opts.Dir, "logs"))
	}
	return nil
}

func nodeReady(n *corev1.Node) bool {
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Stop ends the cluster and removes everything it made: the node's processes and pods, its cgroups, its network
// namespace with its veth, its routes and iptables rules, and its work folder unless KeepDir. It may be called on a
// cluster that did not finish starting, and more than once.
func (c *Cluster) Stop() error {
	if c.node != nil && c.node.Process != nil {
		_ = c.node.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.node.Process.Kill()
			<-c.done
		}
	}
	if c.logsKept != nil {
		<-c.logsKept
	}
	var errs []error
	if unlock, err := lockMachine(); err != nil {
		errs = append(errs, err)
	} else {
		if err := removeCluster(c.name); err != nil {
			errs = append(errs, err)
		}
		unlock()
	}
	if !c.opts.KeepDir && c.opts.Dir != "" {
		if err := os.RemoveAll(c.opts.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
