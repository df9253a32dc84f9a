// Command image writes the product image as a docker-archive tarball, without a Docker engine: the final stage of
// the Dockerfile, FROM gcr.io/distroless/static:nonroot with the build stage's programs copied to /. The base layer
// holds what distroless static:nonroot provides that our programs use (the users root, nobody and nonroot, /tmp,
// the nonroot home and the build machine's CA certificates); the second layer holds every file of --binaries at /.
// Timestamps are fixed, so the same binaries give the same image digest.
//
//	go run ./hack/image --binaries bin/static --tag quay.io/org/cluster-proxy-operator:v1.2.3 --output bin/image.tar
//
// With --platforms it builds one image per platform, from the programs in <binaries>/<os>_<arch>, as one
// multi-platform image: written as an OCI image layout (--layout) and pushed to a registry (--push, with the
// credentials of the Docker config, as docker and crane find them).
//
//	go run ./hack/image --platforms linux/amd64,linux/arm64 --binaries bin/static --layout bin/image-index --push <ref>
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
)

const (
	caBundle   = "/etc/ssl/certs/ca-certificates.crt"
	entrypoint = "/manager"
	nonroot    = 65532
)

// config is the image's run configuration: distroless static:nonroot's, with the Dockerfile's USER and ENTRYPOINT.
var config = v1.Config{
	User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
	Entrypoint: []string{entrypoint},
	WorkingDir: "/home/nonroot",
	Env: []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=" + caBundle,
	},
}

const passwd = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`

const group = `root:x:0:
nobody:x:65534:
nonroot:x:65532:
`

// baseFiles is the part of gcr.io/distroless/static:nonroot the programs rely on, with caCerts as the CA bundle.
func baseFiles(caCerts []byte) []ociimage.File {
	return []ociimage.File{
		ociimage.Dir("etc", 0o755, 0),
		ociimage.Regular("etc/group", 0o644, []byte(group)),
		ociimage.Regular("etc/passwd", 0o644, []byte(passwd)),
		ociimage.Dir("etc/ssl", 0o755, 0),
		ociimage.Dir("etc/ssl/certs", 0o755, 0),
		ociimage.Regular(strings.TrimPrefix(caBundle, "/"), 0o644, caCerts),
		ociimage.Dir("home", 0o755, 0),
		ociimage.Dir("home/nonroot", 0o700, nonroot),
		ociimage.Dir("root", 0o700, 0),
		ociimage.Dir("tmp", 0o1777, 0),
	}
}

// programFiles is COPY --from=build /out/ /: every file of folder at /, executable and owned by root.
func programFiles(folder string) ([]ociimage.File, error) {
	entries, err := os.ReadDir(folder)
	if err != nil {
		return nil, fmt.Errorf("read the binaries: %w", err)
	}
	var files []ociimage.File
	for _, e := range entries {
		f, err := ociimage.Copy(e.Name(), 0o755, filepath.Join(folder, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("%w: the image root takes programs only", err)
		}
		files = append(files, f)
	}
	if _, err := os.Stat(filepath.Join(folder, entrypoint)); err != nil {
		return nil, fmt.Errorf("the entrypoint %s is not among the binaries: %w", entrypoint, err)
	}
	return files, nil
}

func buildImage(binaries string, platform v1.Platform) (v1.Image, error) {
	caCerts, err := os.ReadFile(caBundle)
	if err != nil {
		return nil, fmt.Errorf("the image's CA bundle is the build machine's %s: %w (install the ca-certificates package)", caBundle, err)
	}
	if !bytes.Contains(caCerts, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("%s holds no PEM certificate", caBundle)
	}
	programs, err := programFiles(binaries)
	if err != nil {
		return nil, err
	}
	return ociimage.BuildFor(platform, config,
		ociimage.Step{Files: baseFiles(caCerts), CreatedBy: "hack/image: the files of gcr.io/distroless/static:nonroot we use"},
		ociimage.Step{Files: programs, CreatedBy: "COPY --from=build /out/ /"},
	)
}

func main() {
	binaries := flag.String("binaries", "", "folder of the static programs to put at / (make build-static OUT=...); with --platforms, the folder of their <os>_<arch> folders")
	tag := flag.String("tag", "", "the image's name and tag, as ctr or docker will list it")
	output := flag.String("output", "", "the docker-archive tarball to write (one platform, this machine's)")
	platforms := flag.String("platforms", "", "comma-separated platforms (os/arch) of a multi-platform image, e.g. linux/amd64,linux/arm64")
	layoutDir := flag.String("layout", "", "with --platforms: the OCI image layout folder to write the image into")
	push := flag.String("push", "", "with --platforms: the reference (registry/repository:tag) to push the image to")
	insecure := flag.Bool("insecure", false, "with --push: speak plain HTTP to the registry (one without TLS)")
	flag.Parse()
	var err error
	switch {
	case flag.NArg() > 0 || *binaries == "":
		flag.Usage()
		os.Exit(2)
	case *platforms != "":
		if *layoutDir == "" && *push == "" {
			fmt.Fprintln(os.Stderr, "image: --platforms needs --layout or --push")
			os.Exit(2)
		}
		err = runIndex(*binaries, strings.Split(*platforms, ","), *layoutDir, *push, *insecure)
	case *tag == "" || *output == "":
		flag.Usage()
		os.Exit(2)
	default:
		err = run(*binaries, *tag, *output)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binaries, tag, output string) error {
	img, err := buildImage(binaries, v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH})
	if err != nil {
		return err
	}
	if err := ociimage.WriteArchive(output, tag, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: %s %s\n", output, tag, digest)
	return nil
}

// runIndex builds the image of each platform from binaries/<os>_<arch> and writes the multi-platform image to
// layoutDir and pushes it to ref (over plain HTTP if insecure), as asked.
func runIndex(binaries string, platforms []string, layoutDir, ref string, insecure bool) error {
	var plats []v1.Platform
	var images []v1.Image
	for _, p := range platforms {
		plat, err := v1.ParsePlatform(strings.TrimSpace(p))
		if err != nil || plat.OS == "" || plat.Architecture == "" {
			return fmt.Errorf("--platforms: %q is not os/arch", p)
		}
		img, err := buildImage(filepath.Join(binaries, plat.OS+"_"+plat.Architecture), *plat)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		plats, images = append(plats, *plat), append(images, img)
	}
	index, err := ociimage.Index(plats, images)
	if err != nil {
		return err
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	if layoutDir != "" {
		if err := os.RemoveAll(layoutDir); err != nil {
			return err
		}
		l, err := layout.Write(layoutDir, empty.Index)
		if err != nil {
			return fmt.Errorf("write %s: %w", layoutDir, err)
		}
		if err := l.AppendIndex(index); err != nil {
			return fmt.Errorf("write %s: %w", layoutDir, err)
		}
		fmt.Printf("%s: %s %s\n", layoutDir, strings.Join(platforms, ","), digest)
	}
	if ref != "" {
		var opts []name.Option
		if insecure {
			opts = append(opts, name.Insecure)
		}
		tag, err := name.NewTag(ref, opts...)
		if err != nil {
			return fmt.Errorf("--push %q: %w", ref, err)
		}
		if err := remote.WriteIndex(tag, index, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("push %s: %w", ref, err)
		}
		fmt.Printf("%s: %s %s\n", ref, strings.Join(platforms, ","), digest)
	}
	return nil
}
