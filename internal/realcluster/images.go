package realcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
)

// coreDNSImage is CoreDNS from Binaries, loaded from a local archive, never pulled.
const coreDNSImage = "registry.local/cluster-proxy-operator/coredns:" + "1.15.0"

// Platform is this machine's, the only one its nodes run.
var Platform = v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}

// loadedImages names the node's own images.
type loadedImages struct{ coreDNS string }

// programImage is an image of one static program at /<name>, run as user.
func programImage(program, name, user string, args ...string) (v1.Image, error) {
	f, err := ociimage.Copy(name, 0o755, program)
	if err != nil {
		return nil, err
	}
	return ociimage.Build(Platform, v1.Config{User: user, Entrypoint: append([]string{"/" + name}, args...)},
		ociimage.Step{Files: []ociimage.File{f}, CreatedBy: "realcluster: " + program})
}

// loadImages writes the pause and CoreDNS images and imports them, then Options.Images, into the node's containerd.
func (c *Cluster) loadImages(ctx context.Context) (loadedImages, error) {
	dir := filepath.Join(c.opts.Dir, "images")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return loadedImages{}, err
	}
	own := []struct{ ref, program, name, user string }{
		{pauseImage, c.opts.Pause, "pause", "65535:65535"},
		{coreDNSImage, filepath.Join(c.opts.Binaries, "coredns"), "coredns", "0:0"},
	}
	archives := []string{}
	for _, img := range own {
		image, err := programImage(img.program, img.name, img.user)
		if err != nil {
			return loadedImages{}, fmt.Errorf("build the %s image: %w", img.name, err)
		}
		path := filepath.Join(dir, img.name+".tar")
		if err := ociimage.WriteArchive(path, img.ref, image); err != nil {
			return loadedImages{}, err
		}
		archives = append(archives, path)
	}
	for _, archive := range append(archives, c.opts.Images...) {
		if err := c.ImportImage(ctx, archive); err != nil {
			return loadedImages{}, err
		}
	}
	return loadedImages{coreDNS: coreDNSImage}, nil
}

// ImportImage loads an image archive into the node's containerd, where pods with imagePullPolicy IfNotPresent or
// Never find it.
func (c *Cluster) ImportImage(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.containerdSocket(), "--namespace", "k8s.io",
		"images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s into %s: %w: %s", archive, c.opts.Name, err, out)
	}
	return nil
}
