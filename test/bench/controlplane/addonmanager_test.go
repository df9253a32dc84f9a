package controlplane

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestAddonManagerVersionNamesWhatIsMissingOrWrong(t *testing.T) {
	notGo := filepath.Join(t.TempDir(), "addon-manager")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\necho addon-manager\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path string
		want       []string
	}{
		{"no path", "", []string{addonManagerEnv + " is not set", "go build -mod=vendor ./cmd/addon-manager"}},
		{"not a Go program", notGo, []string{addonManagerEnv + "=" + notGo, "not a Go program"}},
		{"another Go program", self, []string{"controlplane.test, not the existing addon's manager " + addonManagerPackage}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := addonManagerVersion(c.path)
			if err == nil {
				t.Fatalf("%q was taken for the addon's manager", c.path)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A program built from the addon's module path and manager package is taken, whatever its version.
func TestAddonManagerVersionTakesTheAddonsManagerPackage(t *testing.T) {
	src := t.TempDir()
	main := filepath.Join(src, "cmd", "addon-manager")
	if err := os.MkdirAll(main, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		filepath.Join(src, "go.mod"):   "module open-cluster-management.io/cluster-proxy\n\ngo 1.24\n",
		filepath.Join(main, "main.go"): "package main\n\nfunc main() {}\n",
	} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "addon-manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd/addon-manager")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a program of the addon's manager package: %v\n%s", err, out)
	}
	version, err := addonManagerVersion(bin)
	if err != nil {
		t.Fatal(err)
	}
	if version == "" {
		t.Error("no version text")
	}
}
