//go:build e2e

package main_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// TestStopsAndRemovesEverythingWhenItsReaderLeaves runs 'make run' as 'make run | head' would: its output goes to
// a pipe whose reader closes once the system is up. The program must stop the system, remove everything from the
// machine and exit 0, as at Ctrl-C.
func TestStopsAndRemovesEverythingWhenItsReaderLeaves(t *testing.T) {
	if os.Getenv("NODE_ASSETS") == "" {
		t.Fatal("NODE_ASSETS is not set: run this test with 'make e2e'")
	}
	bin := filepath.Join(t.TempDir(), "localsystem")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	reader, writer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = repo.Root()
	cmd.Stdout = writer
	var stderr strings.Builder
	cmd.Stderr = &stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	writer.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	lines := bufio.NewScanner(reader)
	var output []string
	up := false
	for !up && lines.Scan() {
		output = append(output, lines.Text())
		up = lines.Text() == "Up until Ctrl-C."
	}
	if !up {
		t.Fatalf("the system did not come up: %v\nstdout:\n%s\nstderr:\n%s", <-exited, strings.Join(output, "\n"), stderr.String())
	}
	t.Logf("ready after %s", time.Since(began).Round(time.Second))
	summary := strings.Join(output, "\n")
	for _, want := range []string{"CLUSTER NAME", "cluster1 ", "1st-cluster ", "user-server.kubeconfig", "curl --proxytunnel", "MiB of memory"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary has no %q:\n%s", want, summary)
		}
	}
	healthy := 0
	for i, line := range output {
		if !strings.HasPrefix(line, "CLUSTER NAME") {
			continue
		}
		// The table's rows follow its header, up to a blank line.
		for _, row := range output[i+1:] {
			if row == "" {
				break
			}
			if f := strings.Fields(row); len(f) < 5 || f[1] != "True" || f[2] != "True" || f[3] != "True" {
				t.Errorf("not healthy in the health table: %q", row)
			} else {
				healthy++
			}
		}
	}
	if healthy != 2 {
		t.Errorf("%d healthy clusters in the health table, want cluster1 and 1st-cluster:\n%s", healthy, summary)
	}

	reader.Close() // the reader leaves, as head does
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("still running 3 minutes after its reader left\nstderr:\n%s", stderr.String())
	}
	for index := 1; index <= 3; index++ {
		if left := realcluster.Leftovers(index, ""); len(left) > 0 {
			t.Errorf("cluster %d left: %v", index, left)
		}
	}
}
