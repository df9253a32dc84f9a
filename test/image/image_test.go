// Package image tests the container image's Dockerfile as far as this machine allows without a Docker engine or
// base images: the instructions are the expected ones, and its build stage runs for real — the build context is
// the repository filtered by .dockerignore, 'go mod download' and 'make build-static OUT=/out' run in it — and what
// the final stage copies is exactly the static programs the image's entrypoint and the rendered Deployments run.
// The image 'make image' writes without an engine (hack/image) is checked against the Dockerfile's final stage.
package image

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// instruction is one Dockerfile instruction: its keyword and the rest of the line, continuations joined.
type instruction struct{ keyword, args string }

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var pending string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if pending == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending += cont + " "
			continue
		}
		line = pending + line
		pending = ""
		keyword, args, _ := strings.Cut(line, " ")
		out = append(out, instruction{strings.ToUpper(keyword), strings.TrimSpace(args)})
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDockerfileInstructions(t *testing.T) {
	got := parseDockerfile(t, filepath.Join(repo.Root(), "Dockerfile"))
	want := []instruction{
		{"FROM", "golang:1.26 AS build"},
		{"WORKDIR", "/src"},
		{"COPY", "go.mod go.sum ./"},
		{"RUN", "go mod download"},
		{"COPY", ". ."},
		{"RUN", "make build-static OUT=/out"},
		{"FROM", "gcr.io/distroless/static:nonroot"},
		{"COPY", "--from=build /out/ /"},
		{"USER", "65532:65532"},
		{"ENTRYPOINT", `["/manager"]`},
	}
	if len(got) != len(want) {
		t.Fatalf("Dockerfile has %d instructions, want %d (update this test with the build it emulates):\n%v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("instruction %d: %s %s, want %s %s (update the emulated build in TestDockerBuildStage and hack/image)", i+1, got[i].keyword, got[i].args, want[i].keyword, want[i].args)
		}
	}
}

// TestDockerBuildStage runs the build stage of the Dockerfile in a copy of its build context and checks the files
// the final stage copies to the image's root.
func TestDockerBuildStage(t *testing.T) {
	root := repo.Root()
	ignored := dockerignore(t, filepath.Join(root, ".dockerignore"))
	if !ignored["bin"] {
		t.Errorf(".dockerignore must exclude bin/ (local tools and control-plane binaries, over a GiB)")
	}
	// COPY . . into WORKDIR /src, honouring .dockerignore.
	src := filepath.Join(t.TempDir(), "src")
	copyContext(t, root, src, ignored)
	out := filepath.Join(t.TempDir(), "out")
	for _, step := range [][]string{{"go", "mod", "download"}, {"make", "build-static", "OUT=" + out}} {
		cmd := exec.Command(step[0], step[1:]...)
		cmd.Dir = src
		if output, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("RUN %s in the build context: %v\n%s", strings.Join(step, " "), err, output)
		}
	}

	// COPY --from=build /out/ /: the image's root holds exactly the four programs, static and executable.
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		checkStaticExecutable(t, filepath.Join(out, e.Name()))
	}
	sort.Strings(names)
	if want := []string{"kubectl-cluster_proxy", "manager", "proxy-agent", "proxy-server"}; strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("the image root holds %v, want %v", names, want)
	}

	// What runs from the image exists in it: the entrypoint, and the commands of the Deployments the operator renders.
	mpc := &proxyv1alpha1.ManagedProxyConfiguration{ObjectMeta: metav1.ObjectMeta{Name: proxyv1alpha1.DefaultConfigurationName}}
	mpc.Spec.ProxyAgent.Image, mpc.Spec.ProxyAgent.Replicas = "example.com/cluster-proxy:1", 1
	work, _, err := render.AgentWork(render.AgentInput{Cluster: "cluster1", MPC: mpc, EntrypointHost: "hub.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	commands := []string{"/manager", render.ServerDeployment(mpc).Spec.Template.Spec.Containers[0].Command[0]}
	for _, m := range work.Spec.Workload.Manifests {
		d := &appsv1.Deployment{}
		if err := json.Unmarshal(m.Raw, d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Deployment" {
			commands = append(commands, d.Spec.Template.Spec.Containers[0].Command[0])
		}
	}
	if len(commands) != 3 {
		t.Fatalf("found the commands %v; want the entrypoint, the proxy-server's and the proxy-agent's", commands)
	}
	for _, c := range commands {
		if _, err := os.Stat(filepath.Join(out, c)); err != nil {
			t.Errorf("%s runs from the image but is not in it: %v", c, err)
		}
	}
}

// dockerignore reads the top-level names a .dockerignore excludes; it fails on patterns this test does not
// emulate, so the emulated context stays the real one.
func dockerignore(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the image build needs a .dockerignore: %v", err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := strings.Trim(line, "/")
		if strings.ContainsAny(name, "*?[!/") {
			t.Fatalf(".dockerignore pattern %q: this test emulates top-level names only; extend it", line)
		}
		out[name] = true
	}
	return out
}

func copyContext(t *testing.T, from, to string, ignored map[string]bool) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if top := strings.SplitN(rel, string(filepath.Separator), 2)[0]; ignored[top] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(to, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return nil // no symlinks or devices in the sources
		}
	})
	if err != nil {
		t.Fatalf("copy the build context: %v", err)
	}
}

func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// checkStaticExecutable fails unless path is an executable ELF file with no program interpreter and no shared
// libraries: distroless/static has no C library.
func checkStaticExecutable(t *testing.T, path string) {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm()&0o111 == 0 {
		t.Errorf("%s is not executable", filepath.Base(path))
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Errorf("%s is not an ELF executable: %v", filepath.Base(path), err)
		return
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (it has a program interpreter)", filepath.Base(path))
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v", filepath.Base(path), libs)
	}
}
