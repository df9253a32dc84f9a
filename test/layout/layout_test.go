// Package layout checks what the linter's import rules (depguard, .golangci.yml) cannot: they see one file's
// imports, these tests what a program links in the end.
package layout

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/cluster-proxy-operator/cluster-proxy-operator/"

// deps runs go list over patterns and returns each package's dependencies, both without the module's prefix.
func deps(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	args := append([]string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`}, patterns...)
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		var own []string
		for _, dep := range fields[1:] {
			if rel, ok := strings.CutPrefix(dep, module); ok {
				own = append(own, rel)
			}
		}
		graph[strings.TrimPrefix(fields[0], module)] = own
	}
	return graph
}

// TestDataPlaneLinksTheContractNotTheHub: the proxy-server, the proxy-agent, the Go client and the kubectl plugin
// share with the manager only internal/contract (and the API); none of them links the manager's reconcilers, its
// pure logic or its scheme, however indirectly.
func TestDataPlaneLinksTheContractNotTheHub(t *testing.T) {
	programs := []string{"cmd/proxy-agent", "cmd/proxy-server", "pkg/clusterproxy", "cmd/kubectl-cluster_proxy"}
	patterns := make([]string, len(programs))
	for i, p := range programs {
		patterns[i] = module + p
	}
	graph := deps(t, patterns...)
	if len(graph) != len(programs) {
		t.Fatalf("go list answered for %d packages, want %d", len(graph), len(programs))
	}
	for pkg, own := range graph {
		for _, dep := range own {
			for _, hub := range []string{"controllers", "internal/hub/", "internal/scheme", "internal/localsystem"} {
				if strings.HasPrefix(dep, hub) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

// TestNoProgramLinksTestSupport: internal/testsupport is test harnesses only. No package that a program or a test of
// another package builds on links it, but the harnesses themselves.
func TestNoProgramLinksTestSupport(t *testing.T) {
	graph := deps(t, module+"...")
	checked := 0
	for pkg, own := range graph {
		if strings.HasPrefix(pkg, "internal/testsupport/") {
			continue
		}
		checked++
		for _, dep := range own {
			if strings.HasPrefix(dep, "internal/testsupport/") {
				t.Errorf("%s links %s: move what it needs to a leaf such as internal/process, internal/kubeclient or internal/repo", pkg, dep)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("go list saw %d packages outside internal/testsupport; the module has more", checked)
	}
}

// maxBinaryBytes is the largest file without text the repository may track: a built program or an archive belongs in
// a release, not in every clone.
const maxBinaryBytes = 1 << 20

func TestNoLargeBinaryIsTracked(t *testing.T) {
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel (the test reads what the repository tracks): %v", err)
	}
	dir := strings.TrimSpace(string(root))
	out, err := exec.Command("git", "-C", dir, "ls-files", "-z").Output() // every tracked file, not only this folder's
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		path := filepath.Join(dir, name)
		info, err := os.Lstat(path)
		if err != nil || !info.Mode().IsRegular() || info.Size() <= maxBinaryBytes {
			continue // deleted in the work tree, a link, or small
		}
		if binary, err := hasNUL(path); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if binary {
			t.Errorf("%s is tracked and is a %d-byte file that is not text: build it (make build), do not commit it", name, info.Size())
		}
	}
}

// hasNUL says whether the first 8 KiB of the file hold a NUL byte, as git's own test for binary content does.
func hasNUL(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 8<<10)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return false, err
	}
	return bytes.IndexByte(buf[:n], 0) >= 0, nil
}
