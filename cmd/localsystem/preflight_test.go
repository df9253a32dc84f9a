package main_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStopsAtOnceNamingWhatTheMachineLacks runs 'make run' where nodes cannot run: as an unprivileged user, with no
// node binaries. It must exit 1 at once, naming each missing piece and the make target that provides it.
func TestStopsAtOnceNamingWhatTheMachineLacks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs the program as another user, which needs root")
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the unprivileged user runs the program from here
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "localsystem")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	empty := filepath.Join(dir, "no-node-assets")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--workdir", filepath.Join(dir, "work"))
	cmd.Env = append(os.Environ(), "NODE_ASSETS="+empty)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\nstderr:\n%s", err, stderr.String())
	}
	for _, want := range []string{"root", "kube-apiserver in", "kubelet in", "make node-assets"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not name %q:\n%s", want, stderr.String())
		}
	}
}
