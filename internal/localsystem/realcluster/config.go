package realcluster

import (
	"fmt"
	"os"
	"path/filepath"
)

// pauseImage is the sandbox image of every pod: bin/pause, loaded from a local archive, never pulled.
const pauseImage = "registry.local/cluster-proxy-operator/pause:1"

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

// writeConfig writes the node's configuration files into <Dir>/config and <Dir>/cni/net.d.
func (c *Cluster) writeConfig() error {
	dir := c.opts.Dir
	files := map[string]string{
		"config/containerd.toml":     c.containerdConfig(),
		"config/kubelet.yaml":        c.kubeletConfig(),
		"config/kube-proxy.yaml":     c.kubeProxyConfig(),
		"config/resolv.conf":         "# no upstream: only the cluster's own names resolve\n",
		"cni/net.d/10-pods.conflist": c.cniConfig(),
	}
	for _, host := range c.opts.PlainHTTPRegistries {
		files[filepath.Join("config", "certs.d", host, "hosts.toml")] = plainHTTPHost(host)
	}
	for host, mirror := range c.opts.RegistryMirrors {
		// The mirror is the namespace's server as well as its host: containerd never falls back to the named host.
		files[filepath.Join("config", "certs.d", host, "hosts.toml")] = plainHTTPHost(mirror)
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// plainHTTPHost is containerd's hosts.toml for a registry served over plain HTTP at host (host:port).
func plainHTTPHost(host string) string {
	return fmt.Sprintf(`server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`, host)
}

func (c *Cluster) containerdConfig() string {
	d := filepath.Join(c.opts.Dir, "containerd")
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  # This machine denies CAP_SYS_RESOURCE even to root: runc must not raise oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    # One hosts.toml per registry of Options.PlainHTTPRegistries and Options.RegistryMirrors; any other registry is
    # pulled from as containerd's default does (https), which this machine does not reach.
    config_path = %[10]q
`, filepath.Join(d, "root"), filepath.Join(d, "state"), nodeContainerdSocket, nodeContainerdSocket+".ttrpc",
		filepath.Join(d, "opt"), pauseImage, filepath.Join(d, "runc"), cniBinDir, filepath.Join(c.opts.Dir, "cni", "net.d"),
		filepath.Join(c.opts.Dir, "config", "certs.d"))
}

// Inside the node's mount namespace /run and /var/lib are the cluster's own (node.sh), so the node's sockets can have
// the short paths a unix socket needs (108 bytes at most), whatever the length of Dir.
const (
	nodeContainerdSocket = "/run/containerd/containerd.sock"
	nodeKubeletRoot      = "/var/lib/kubelet"
)

// containerdSocket is a short path on the machine to the node's containerd socket (ctr images import): a symlink to
// where node.sh's /run really is.
func (c *Cluster) containerdSocket() string {
	return filepath.Join(ownerDir, c.name+".sock")
}

// cniConfig is a bridge with host-local addresses; pods are masqueraded to the node's address when they leave the
// namespace (to the machine's side of the veth, the only place they can go).
func (c *Cluster) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": %[1]q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[2]q, "gateway": %[3]q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %[4]q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, c.name, PodCIDR, podGateway, filepath.Join(c.opts.Dir, "cni", "ipam"))
}

func (c *Cluster) kubeletConfig() string {
	pki := filepath.Join(c.opts.Dir, "pki")
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine mounts cgroup v1 (real-nodes.md, blocker 2).
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
tlsCertFile: %[4]s/kubelet.crt
tlsPrivateKeyFile: %[4]s/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]s/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
clusterDNS: [%[5]s]
resolvConf: %[6]s
# Refuse to start rather than change the machine's kernel settings (blocker 6: node.sh shows the expected values).
protectKernelDefaults: true
failSwapOn: false
volumePluginDir: %[7]s
serializeImagePulls: false
# Pods see a changed Secret volume within about 10 s, not the default minute: the local system's manager keeps a
# rotated CA for a grace that only needs to outlast this (--ca-rollover-grace).
syncFrequency: 10s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`, c.name, nodeContainerdSocket, c.NodeIP, pki, DNSServiceIP, filepath.Join(c.opts.Dir, "config", "resolv.conf"),
		filepath.Join(nodeKubeletRoot, "volume-plugins"))
}

func (c *Cluster) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %[1]s}
hostnameOverride: %[2]s
clusterCIDR: %[3]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# Leave the machine-wide conntrack settings alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, filepath.Join(c.opts.Dir, "config", "kube-proxy.kubeconfig"), c.opts.Name, PodCIDR)
}
