package realcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
)

// coreDNSImage is CoreDNS from Binaries, loaded from a local archive, never pulled.
const coreDNSImage = "registry.local/cluster-proxy-operator/coredns:1.15.0"

// archiveMu serialises the writing of the node images' archives by the clusters of one process.
var archiveMu sync.Mutex

// nodeImageArchive is the archive of the image of one node program, kept in <Binaries>/images and written again only
// when the program is newer: every cluster, and every run, loads the same file.
func (c *Cluster) nodeImageArchive(program, name, ref, user string) (string, error) {
	archiveMu.Lock()
	defer archiveMu.Unlock()
	dir := filepath.Join(c.opts.Binaries, "images")
	path := filepath.Join(dir, name+".tar")
	prog, err := os.Stat(program)
	if err != nil {
		return "", err
	}
	if archive, err := os.Stat(path); err == nil && archive.ModTime().After(prog.ModTime()) {
		return path, nil
	}
	img, err := ociimage.Program(program, name, user)
	if err != nil {
		return "", fmt.Errorf("build the %s image: %w", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	if err := ociimage.WriteArchive(tmp, ref, img); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// loadImages imports the pause and CoreDNS images, then Options.Images, into the node's containerd.
func (c *Cluster) loadImages(ctx context.Context) error {
	pause, err := c.nodeImageArchive(c.opts.Pause, "pause", pauseImage, "65535:65535")
	if err != nil {
		return err
	}
	coreDNS, err := c.nodeImageArchive(filepath.Join(c.opts.Binaries, "coredns"), "coredns", coreDNSImage, "0:0")
	if err != nil {
		return err
	}
	for _, archive := range append([]string{pause, coreDNS}, c.opts.Images...) {
		if err := c.ImportImage(ctx, archive); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage loads an image archive into the node's containerd, where pods with imagePullPolicy IfNotPresent or
// Never find it.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	return c.ctr(ctx, "images", "import", archive)
}

// TagImage gives an image already in the node's containerd another name, as a registry mirror would serve it.
func (c *Cluster) TagImage(ctx context.Context, source, target string) error {
	return c.ctr(ctx, "images", "tag", "--force", source, target)
}

// KillContainer sends signal (e.g. "SIGKILL") to the main process of the container with containerID (a pod's
// status.containerStatuses[].containerID, with or without its "containerd://" prefix), through the node's containerd.
func (c *Cluster) KillContainer(ctx context.Context, containerID, signal string) error {
	return c.ctr(ctx, "tasks", "kill", "--signal", signal, strings.TrimPrefix(containerID, "containerd://"))
}

// ctr runs ctr against the node's containerd, in the namespace of Kubernetes' images and containers.
func (c *Cluster) ctr(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", c.containerdSocket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s on %s: %w: %s", strings.Join(args, " "), c.opts.Name, err, out)
	}
	return nil
}
