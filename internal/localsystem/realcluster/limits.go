package realcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// inotifyLimits are the machine's inotify limits a node needs room in, at their least. Every kubelet, containerd,
// kube-apiserver, kube-proxy and kube-controller-manager holds inotify instances (about 20 a cluster), all counted
// against root's one limit: Debian's default of 128 instances runs out at the sixth or seventh cluster, and a kubelet
// without one never gets Ready ("inotify_init: too many open files"). Systems side by side (make run beside make
// e2e, or make e2e beside make e2e-olm) need more.
var inotifyLimits = map[string]int{
	"max_user_instances": 1024,
	"max_user_watches":   524288,
}

// inotifyDir is where the kernel's inotify limits are read and written.
const inotifyDir = "/proc/sys/fs/inotify"

// raiseInotifyLimits raises each limit of dir that is below its least to that value, and leaves higher ones alone.
func raiseInotifyLimits(dir string) error {
	for name, least := range inotifyLimits {
		if err := raiseToAtLeast(filepath.Join(dir, name), least); err != nil {
			return err
		}
	}
	return nil
}

// raiseToAtLeast writes least to the sysctl file path when it holds less.
func raiseToAtLeast(path string, least int) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	current, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("read %s: %q is not a number", path, strings.TrimSpace(string(raw)))
	}
	if current >= least {
		return nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(least)), 0o644); err != nil {
		return fmt.Errorf("raise %s from %d to %d, which clusters side by side need: %w", path, current, least, err)
	}
	return nil
}
