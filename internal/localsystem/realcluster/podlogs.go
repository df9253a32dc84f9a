package realcluster

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// PodLogs is the folder where the node's container logs stay after their pods are gone: kubelet removes a pod's logs
// with the pod, so a replica a rolling update replaced would leave nothing to read after a failed test. Each log
// file kubelet writes is hard-linked here as <namespace>_<pod>_<uid>/<container>/<file>.<inode> while the cluster
// runs; a link keeps the file's content when kubelet unlinks it, or rotates it away.
func (c *Cluster) PodLogs() string { return filepath.Join(c.opts.Dir, "pod-logs") }

// keepPodLogs links every container log under the node's /var/log/pods into PodLogs every interval, until done.
func (c *Cluster) keepPodLogs(interval time.Duration) {
	k := podLogKeeper{from: filepath.Join(c.opts.Dir, "root", "var-log", "pods"), to: c.PodLogs(), linked: map[uint64]bool{}}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		k.link()
		select {
		case <-c.done:
			return
		case <-t.C:
		}
	}
}

type podLogKeeper struct {
	from, to string
	// linked holds the inodes linked already: kubelet's rotation renames a file, which is the same file.
	linked map[uint64]bool
}

// link links the log files not linked yet. A file that goes while it looks is simply missed.
func (k *podLogKeeper) link() {
	_ = filepath.WalkDir(k.from, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.Contains(d.Name(), ".log") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok || k.linked[st.Ino] {
			return nil
		}
		rel, err := filepath.Rel(k.from, path)
		if err != nil {
			return nil
		}
		to := filepath.Join(k.to, fmt.Sprintf("%s.%d", rel, st.Ino))
		if os.MkdirAll(filepath.Dir(to), 0o700) != nil {
			return nil
		}
		if err := os.Link(path, to); err == nil || os.IsExist(err) {
			k.linked[st.Ino] = true
		}
		return nil
	})
}
