package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// TestTheMultiPlatformImageHoldsEachPlatformsPrograms runs make image-index and make image-push on a small program
// built for linux/amd64 and linux/arm64, pushing to a registry served on 127.0.0.1 (go-containerregistry's), and
// reads the image back: one manifest per platform, each of whose /manager is an
// executable for that platform, and the same image in the OCI layout it wrote.
func TestTheMultiPlatformImageHoldsEachPlatformsPrograms(t *testing.T) {
	work := t.TempDir()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	src := filepath.Join(work, "src")
	must(t, os.MkdirAll(src, 0o755))
	must(t, os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.com/manager\n\ngo 1.24\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(src, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644))
	// make image-index and make image-push read the programs of bin/platforms/<os>_<arch> (build-static-platforms
	// writes them; make -o keeps it from building the product's for this test).
	bin := filepath.Join(work, "bin")
	for arch := range machines {
		cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(bin, "platforms", "linux_"+arch, "manager"), ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build the program for %s: %v\n%s", arch, err, out)
		}
	}

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/cluster-proxy-operator/cluster-proxy-operator:v0.0.1"
	for _, args := range [][]string{
		{"make", "--no-print-directory", "-o", "build-static-platforms", "image-index", "BIN_DIR=" + bin, "IMAGE_INDEX=" + filepath.Join(work, "layout")},
		{"make", "--no-print-directory", "-o", "build-static-platforms", "image-push", "BIN_DIR=" + bin, "IMAGE=" + ref},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = repo.Root()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	tag, err := name.NewTag(ref)
	must(t, err)
	index, err := remote.Index(tag)
	must(t, err)
	manifest, err := index.IndexManifest()
	must(t, err)
	if len(manifest.Manifests) != len(machines) {
		t.Fatalf("the pushed image has %d manifests; want one per platform: %+v", len(manifest.Manifests), manifest.Manifests)
	}
	for _, d := range manifest.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			t.Fatalf("manifest %s has platform %+v", d.Digest, d.Platform)
		}
		want, ok := machines[d.Platform.Architecture]
		if !ok {
			t.Fatalf("manifest %s is for %s, not a platform asked for", d.Digest, d.Platform.Architecture)
		}
		delete(machines, d.Platform.Architecture)
		img, err := index.Image(d.Digest)
		must(t, err)
		cf, err := img.ConfigFile()
		must(t, err)
		if cf.OS != "linux" || cf.Architecture != d.Platform.Architecture {
			t.Errorf("%s: the image's config says %s/%s", d.Platform.Architecture, cf.OS, cf.Architecture)
		}
		if got := programMachine(t, img, "manager"); got != want {
			t.Errorf("%s: /manager is for %s, want %s", d.Platform.Architecture, got, want)
		}
	}

	l, err := layout.ImageIndexFromPath(filepath.Join(work, "layout"))
	must(t, err)
	written, err := l.IndexManifest()
	must(t, err)
	pushed, err := index.Digest()
	must(t, err)
	if len(written.Manifests) != 1 || written.Manifests[0].Digest != pushed {
		t.Errorf("the OCI layout holds %+v; want the pushed image %s", written.Manifests, pushed)
	}
}

// programMachine is the ELF machine of the file at /<path> in img's layers.
func programMachine(t *testing.T, img v1.Image, path string) elf.Machine {
	t.Helper()
	layers, err := img.Layers()
	must(t, err)
	for _, l := range layers {
		rc, err := l.Uncompressed()
		must(t, err)
		tr := tar.NewReader(rc)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			must(t, err)
			if strings.TrimPrefix(hdr.Name, "./") != path {
				continue
			}
			data, err := io.ReadAll(tr)
			must(t, err)
			_ = rc.Close()
			f, err := elf.NewFile(bytes.NewReader(data))
			must(t, err)
			return f.Machine
		}
		_ = rc.Close()
	}
	t.Fatalf("no /%s in the image", path)
	return 0
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
