// Package ociimage builds container images from files on this machine, without a Docker engine, with
// go-containerregistry: reproducible layers (every timestamp the Unix epoch), an image config, and a docker-archive
// tarball that 'ctr images import' and 'docker load' read.
package ociimage

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer: its tar header, and its content, given as bytes (Data) or as a file of this machine
// (Source) read when the layer is written.
type File struct {
	tar.Header
	Data   []byte
	Source string
}

// Dir is a directory entry; name has no leading slash.
func Dir(name string, mode int64, uid int) File {
	return File{Header: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid}}
}

// Regular is a file holding data, owned by root.
func Regular(name string, mode int64, data []byte) File {
	return File{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, Data: data}
}

// Copy is a file with the content of source on this machine, owned by root.
func Copy(name string, mode int64, source string) (File, error) {
	info, err := os.Stat(source)
	if err != nil {
		return File{}, err
	}
	if !info.Mode().IsRegular() {
		return File{}, fmt.Errorf("%s is not a regular file", source)
	}
	return File{Header: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: info.Size()}, Source: source}, nil
}

// Layer is an uncompressed layer of files, written anew each time it is read rather than held in memory.
func Layer(files []File) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		r, w := io.Pipe()
		go func() { w.CloseWithError(writeLayer(w, files)) }()
		return r, nil
	})
}

func writeLayer(w io.Writer, files []File) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		hdr := f.Header
		hdr.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(&hdr); err != nil {
			return err
		}
		if err := writeContent(tw, f); err != nil {
			return fmt.Errorf("write /%s: %w", f.Name, err)
		}
	}
	return tw.Close()
}

func writeContent(w io.Writer, f File) error {
	if f.Source == "" {
		_, err := w.Write(f.Data)
		return err
	}
	in, err := os.Open(f.Source)
	if err != nil {
		return err
	}
	defer in.Close()
	n, err := io.Copy(w, in)
	if err == nil && n != f.Size {
		err = fmt.Errorf("%s changed while the layer was written: %d bytes, %d expected", f.Source, n, f.Size)
	}
	return err
}

// Step is one layer and the history line that says where it comes from.
type Step struct {
	Files     []File
	CreatedBy string
}

// Build is the image of steps, bottom first, with config, for this machine's platform: its programs are built here,
// for here.
func Build(config v1.Config, steps ...Step) (v1.Image, error) {
	return BuildFor(v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}, config, steps...)
}

// BuildFor is Build for platform, whose programs steps must hold.
func BuildFor(platform v1.Platform, config v1.Config, steps ...Step) (v1.Image, error) {
	adds := make([]mutate.Addendum, 0, len(steps))
	for _, s := range steps {
		l, err := Layer(s.Files)
		if err != nil {
			return nil, err
		}
		adds = append(adds, mutate.Addendum{Layer: l, History: v1.History{CreatedBy: s.CreatedBy}})
	}
	img, err := mutate.Append(empty.Image, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf.OS, cf.Architecture, cf.Variant, cf.Config = platform.OS, platform.Architecture, platform.Variant, config
	return mutate.ConfigFile(img, cf)
}

// Index is the multi-platform image of images, one per platform in the order given: a Docker manifest list, as its
// images are Docker manifests (what every registry and runtime takes).
func Index(platforms []v1.Platform, images []v1.Image) (v1.ImageIndex, error) {
	if len(platforms) != len(images) {
		return nil, fmt.Errorf("%d platforms for %d images", len(platforms), len(images))
	}
	adds := make([]mutate.IndexAddendum, len(images))
	for i, img := range images {
		adds[i] = mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platforms[i]}}
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.DockerManifestList), adds...), nil
}

// Program is the image of one static program of this machine at /name, its entrypoint, run as user ("uid:gid").
func Program(program, name, user string) (v1.Image, error) {
	f, err := Copy(name, 0o755, program)
	if err != nil {
		return nil, err
	}
	return Build(v1.Config{User: user, Entrypoint: []string{"/" + name}}, Step{Files: []File{f}, CreatedBy: "the program " + program})
}

// WriteArchive writes img as a docker-archive tarball tagged ref.
func WriteArchive(path, ref string, img v1.Image) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
