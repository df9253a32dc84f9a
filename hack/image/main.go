// Command image writes the product image as a docker-archive tarball, without a Docker engine: the final stage of
// the Dockerfile, FROM gcr.io/distroless/static:nonroot with the build stage's programs copied to /. The base layer
// holds what distroless static:nonroot provides that our programs use (the users root, nobody and nonroot, /tmp,
// the nonroot home and the build machine's CA certificates); the second layer holds every file of --binaries at /.
// Timestamps are fixed, so the same binaries give the same image digest.
//
//	go run ./hack/image --binaries bin/static --tag quay.io/org/cluster-proxy-operator:latest --output bin/image.tar
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

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

func buildImage(binaries string) (v1.Image, error) {
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
	return ociimage.Build(config,
		ociimage.Step{Files: baseFiles(caCerts), CreatedBy: "hack/image: the files of gcr.io/distroless/static:nonroot we use"},
		ociimage.Step{Files: programs, CreatedBy: "COPY --from=build /out/ /"},
	)
}

func main() {
	binaries := flag.String("binaries", "", "folder of the static programs to put at / (make build-static OUT=...)")
	tag := flag.String("tag", "", "the image's name and tag, as ctr or docker will list it")
	output := flag.String("output", "", "the docker-archive tarball to write")
	flag.Parse()
	if *binaries == "" || *tag == "" || *output == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*binaries, *tag, *output); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binaries, tag, output string) error {
	img, err := buildImage(binaries)
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
