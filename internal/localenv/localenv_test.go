package localenv_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// TestRunBringsUpReadyHub is the smoke test of 'make run': the real manager against a local hub with the
// repository's samples must become Ready, and Run must leave nothing behind.
func TestRunBringsUpReadyHub(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		// Failing rather than skipping: a skipped smoke test looks like a passing one in CI.
		t.Fatal("KUBEBUILDER_ASSETS is not set: run 'export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh)' first")
	}
	// envtest logs through controller-runtime, which otherwise complains that no logger is set.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	manager := buildManager(t)
	tmpdirBefore, hadTmpdir := os.LookupEnv("TMPDIR")

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := localenv.Run(ctx, localenv.Options{
		ManagerPath:   manager,
		Timeout:       3 * time.Minute,
		ExitWhenReady: true,
		Out:           &out,
	})
	t.Logf("localhub output:\n%s", out.String())
	if err != nil {
		t.Fatalf("Run returned an error: %v", err)
	}

	output := out.String()
	if !regexp.MustCompile(`(?m)^\s+Ready\s+True\b`).MatchString(output) {
		t.Error("the summary has no 'Ready True' row")
	}
	rows := conditionRows(output)
	if len(rows) == 0 {
		t.Error("the summary has no condition table")
	}
	for _, row := range rows {
		if row[1] != "True" {
			t.Errorf("condition %s is %s in the summary of a Ready hub", row[0], row[1])
		}
	}
	export := regexp.MustCompile(`(?m)^\s+export KUBECONFIG=(\S+)$`).FindStringSubmatch(output)
	if export == nil {
		t.Fatal("the summary has no 'export KUBECONFIG=' line")
	}
	workDir := filepath.Dir(export[1])
	if _, err := os.Stat(workDir); !os.IsNotExist(err) {
		t.Errorf("work folder %s created by Run still exists after it returned (stat: %v)", workDir, err)
	}
	if tmpdir, has := os.LookupEnv("TMPDIR"); tmpdir != tmpdirBefore || has != hadTmpdir {
		t.Errorf("TMPDIR is %q after Run, want it restored to %q", tmpdir, tmpdirBefore)
	}
}

// buildManager builds the manager binary the way 'make build' does, into a temporary folder.
func buildManager(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "manager")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/manager")
	cmd.Dir = testenv.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the manager: %v\n%s", err, out)
	}
	return bin
}

// conditionRows returns the TYPE and STATUS of every row of the condition tables in Run's output.
func conditionRows(output string) [][2]string {
	var rows [][2]string
	inTable := false
	scanner := bufio.NewScanner(strings.NewReader(output))
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		switch {
		case len(fields) == 3 && fields[0] == "TYPE" && fields[1] == "STATUS":
			inTable = true
		case inTable && len(fields) >= 2 && !strings.HasSuffix(fields[0], ":"):
			rows = append(rows, [2]string{fields[0], fields[1]})
		default:
			inTable = false
		}
	}
	return rows
}
