package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

const buildCABundle = "/etc/ssl/certs/ca-certificates.crt"

// imageFile is one file of an image's flattened file system; data is kept for files under 1 MiB.
type imageFile struct {
	hdr    *tar.Header
	digest string
	data   []byte
}

// TestMakeImageMatchesDockerfile builds the image with 'make image' and checks that the tarball is what the
// Dockerfile's final stage would build: its USER and ENTRYPOINT, the build stage's programs at /, and the parts of
// distroless static:nonroot the programs rely on; and that the same binaries give the same image digest.
func TestMakeImageMatchesDockerfile(t *testing.T) {
	user, entrypoint := finalStageRunConfig(t)
	bin := t.TempDir()
	const tag = "example.com/cluster-proxy-operator:test"
	img := makeImage(t, bin, "image.tar", tag)

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != user {
		t.Errorf("image USER %q, the Dockerfile says %q", cf.Config.User, user)
	}
	if !slices.Equal(cf.Config.Entrypoint, entrypoint) {
		t.Errorf("image ENTRYPOINT %q, the Dockerfile says %q", cf.Config.Entrypoint, entrypoint)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("image platform %s/%s, the programs are built for linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}

	files := imageFiles(t, img)

	// COPY --from=build /out/ /: the image root holds exactly the build stage's files, byte for byte, executable.
	static := filepath.Join(bin, "static")
	built := map[string]string{}
	entries, err := os.ReadDir(static)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		built[e.Name()] = fileDigest(t, filepath.Join(static, e.Name()))
	}
	atRoot := map[string]string{}
	for p, f := range files {
		if !strings.Contains(p, "/") && f.hdr.Typeflag == tar.TypeReg {
			atRoot[p] = f.digest
			if mode := f.hdr.FileInfo().Mode(); mode != 0o755 || f.hdr.Uid != 0 {
				t.Errorf("/%s has mode %v and owner %d, want -rwxr-xr-x and root", p, mode, f.hdr.Uid)
			}
		}
	}
	if len(built) != 4 {
		t.Errorf("the build stage produced %d files, want the four programs", len(built))
	}
	for p, digest := range built {
		if atRoot[p] != digest {
			t.Errorf("/%s in the image differs from the build stage's (sha256 %q, want %s)", p, atRoot[p], digest)
		}
	}
	for p := range atRoot {
		if _, ok := built[p]; !ok {
			t.Errorf("/%s is in the image but the build stage did not produce it", p)
		}
	}
	if _, ok := atRoot[strings.TrimPrefix(entrypoint[0], "/")]; !ok {
		t.Errorf("the entrypoint %s is not in the image", entrypoint[0])
	}

	checkUsers(t, files, user)
	checkDistrolessFiles(t, files, cf.Config)

	again := makeImage(t, bin, "image-again.tar", tag)
	d1, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := again.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("the same binaries gave two images: %s and %s", d1, d2)
	}
}

// finalStageRunConfig reads the USER and the ENTRYPOINT of the Dockerfile's last stage.
func finalStageRunConfig(t *testing.T) (user string, entrypoint []string) {
	t.Helper()
	instrs := parseDockerfile(t, filepath.Join(repo.Root(), "Dockerfile"))
	for _, in := range instrs {
		switch in.keyword {
		case "FROM":
			user, entrypoint = "", nil
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: want the exec form: %v", in.args, err)
			}
		}
	}
	if user == "" || len(entrypoint) == 0 {
		t.Fatalf("the Dockerfile's final stage has no USER or no ENTRYPOINT (user %q, entrypoint %q)", user, entrypoint)
	}
	return user, entrypoint
}

// makeImage runs 'make image' with bin as BIN_DIR and opens the tarball it writes, by its tag.
func makeImage(t *testing.T, bin, tarName, tag string) v1.Image {
	t.Helper()
	path := filepath.Join(bin, tarName)
	cmd := exec.Command("make", "--no-print-directory", "image", "BIN_DIR="+bin, "IMAGE_TAR="+path, "IMG="+tag)
	cmd.Dir = repo.Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &ref)
	if err != nil {
		t.Fatalf("open %s as %s: %v", path, tag, err)
	}
	return img
}

// imageFiles reads the image's flattened file system, by path without the leading slash.
func imageFiles(t *testing.T, img v1.Image) map[string]imageFile {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]imageFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read the image's files: %v", err)
		}
		h := sha256.New()
		var data bytes.Buffer
		w := io.Writer(h)
		if hdr.Size < 1<<20 {
			w = io.MultiWriter(h, &data)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatal(err)
		}
		p := strings.Trim(strings.TrimPrefix(hdr.Name, "./"), "/")
		files[p] = imageFile{hdr: hdr, digest: hex.EncodeToString(h.Sum(nil)), data: data.Bytes()}
	}
	return files
}

// checkUsers checks /etc/passwd and /etc/group: root, nobody, and the USER's uid and gid as nonroot, whose home
// directory it owns.
func checkUsers(t *testing.T, files map[string]imageFile, user string) {
	t.Helper()
	uid, gid, _ := strings.Cut(user, ":")
	users, groups := colonFile(files["etc/passwd"].data, 7), colonFile(files["etc/group"].data, 4)
	for name, id := range map[string]string{"root": "0", "nobody": "65534", "nonroot": uid} {
		if u := users[name]; u == nil || u[2] != id {
			t.Errorf("/etc/passwd: want user %s with uid %s, got %q", name, id, u)
		}
	}
	for name, id := range map[string]string{"root": "0", "nobody": "65534", "nonroot": gid} {
		if g := groups[name]; g == nil || g[2] != id {
			t.Errorf("/etc/group: want group %s with gid %s, got %q", name, id, g)
		}
	}
	if u := users["nonroot"]; u != nil {
		home := files[strings.TrimPrefix(u[5], "/")]
		if u[5] != "/home/nonroot" || home.hdr == nil || home.hdr.Typeflag != tar.TypeDir || strconv.Itoa(home.hdr.Uid) != uid {
			t.Errorf("nonroot's home %s must be the directory /home/nonroot owned by %s", u[5], uid)
		}
	}
}

// colonFile reads an /etc/passwd-like file: its lines of n colon-separated fields, by their first field.
func colonFile(data []byte, n int) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Split(line, ":"); len(f) == n {
			out[f[0]] = f
		}
	}
	return out
}

// checkDistrolessFiles checks what distroless static:nonroot provides besides the users: the CA bundle the
// environment points at, a sticky /tmp, the working directory.
func checkDistrolessFiles(t *testing.T, files map[string]imageFile, cfg v1.Config) {
	t.Helper()
	if !slices.Contains(cfg.Env, "SSL_CERT_FILE="+buildCABundle) {
		t.Errorf("image Env %q does not point SSL_CERT_FILE at %s", cfg.Env, buildCABundle)
	}
	ca := files[strings.TrimPrefix(buildCABundle, "/")]
	if ca.hdr == nil || ca.digest != fileDigest(t, buildCABundle) {
		t.Errorf("%s in the image is not the build machine's CA bundle", buildCABundle)
	}
	if tmp := files["tmp"]; tmp.hdr == nil || tmp.hdr.FileInfo().Mode() != fs.ModeDir|fs.ModeSticky|0o777 {
		t.Errorf("/tmp must be a directory with mode 1777")
	}
	if wd := files[strings.TrimPrefix(cfg.WorkingDir, "/")]; cfg.WorkingDir != "/home/nonroot" || wd.hdr == nil {
		t.Errorf("the working directory %q must be /home/nonroot and exist", cfg.WorkingDir)
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
