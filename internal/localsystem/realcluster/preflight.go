package realcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Preflight says at once what this machine lacks to run nodes, every missing piece named: root, network and mount
// namespaces, overlayfs, cgroup v1 hierarchies, containerd/runc/CNI plugins and the tools that set up the network,
// and the node binaries in binaries (with pause). nil means Start can run.
func Preflight(binaries, pause string) error {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root: nodes need to create network namespaces, mounts and cgroups (run as root)")
	}
	for _, ns := range []string{"net", "mnt"} {
		if _, err := os.Stat("/proc/self/ns/" + ns); err != nil {
			missing = append(missing, "the kernel's "+ns+" namespaces")
		}
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "overlay") {
		missing = append(missing, "overlayfs in the kernel (containerd's snapshotter)")
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, "pids", "cgroup.procs")); err != nil {
		missing = append(missing, "the cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
	}
	tools := map[string]string{
		"containerd": "containerd", "runc": "runc", "ctr": "containerd", "ip": "iproute2", "nsenter": "util-linux",
		"unshare": "util-linux", "iptables": "iptables", "conntrack": "conntrack", "socat": "socat",
	}
	for tool, pkg := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s: make node-packages)", tool, pkg))
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback", "portmap"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, fmt.Sprintf("the CNI plugin %s in %s (Debian package containernetworking-plugins: make node-packages)", plugin, cniBinDir))
		}
	}
	for _, bin := range NodeBinaries {
		if _, err := os.Stat(filepath.Join(binaries, bin)); err != nil {
			missing = append(missing, fmt.Sprintf("%s in %q (make node-assets)", bin, binaries))
		}
	}
	if _, err := os.Stat(pause); err != nil {
		missing = append(missing, fmt.Sprintf("the pause program %q (make node-assets)", pause))
	}
	if len(missing) == 0 {
		return nil
	}
	return errors.New("this machine cannot run Kubernetes nodes; missing:\n  - " + strings.Join(missing, "\n  - "))
}

// NodeBinaries are the programs Binaries must hold.
var NodeBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl", "coredns"}
