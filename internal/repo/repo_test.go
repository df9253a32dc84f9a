package repo

import (
	"os"
	"path/filepath"
	"testing"
)

func TestModuleRootIsTheNearestFolderUpWithTheModulesGoMod(t *testing.T) {
	root := t.TempDir()
	write := func(dir, module string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+module+"\n\ngo 1.26\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(root, "example.com/product")
	tools := filepath.Join(root, "hack", "tools")
	write(tools, "example.com/product/tools") // a module of its own inside the repository
	pkg := filepath.Join(tools, "cmd", "x")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}

	for dir, want := range map[string]string{root: root, pkg: root, tools: root} {
		if got, err := moduleRoot(dir, "example.com/product"); err != nil || got != want {
			t.Errorf("moduleRoot(%s) = %q, %v; want %q", dir, got, err, want)
		}
	}
	if got, err := moduleRoot(pkg, "example.com/product/tools"); err != nil || got != tools {
		t.Errorf("the tools module from %s: %q, %v; want %q", pkg, got, err, tools)
	}
	if got, err := moduleRoot(pkg, "example.com/other"); err == nil {
		t.Errorf("a module no go.mod declares: %q, want an error", got)
	}
}

func TestRootHoldsThisModulesGoMod(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(Root(), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(Root(), "internal", "repo", "repo.go")); err != nil {
		t.Errorf("Root() = %s, which lacks this file: %v (go.mod %d bytes)", Root(), err, len(data))
	}
}
