package contract

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDataPlaneDependsOnTheContractNotTheHub: the proxy-server, the proxy-agent and the Go client share with the
// manager only this package; none of them links the manager's rendering, reviews or controllers.
func TestDataPlaneDependsOnTheContractNotTheHub(t *testing.T) {
	const module = "github.com/cluster-proxy-operator/cluster-proxy-operator/"
	pkgs := []string{"cmd/proxy-agent", "cmd/proxy-server", "pkg/clusterproxy", "cmd/kubectl-cluster_proxy"}
	args := []string{"list", "-f", `{{.ImportPath}} {{join .Deps " "}}`}
	for _, p := range pkgs {
		args = append(args, module+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(pkgs) {
		t.Fatalf("go list answered for %d packages, want %d:\n%s", len(lines), len(pkgs), out)
	}
	for _, line := range lines {
		fields := strings.Fields(line)
		for _, dep := range fields[1:] {
			if strings.HasPrefix(dep, module+"internal/hub/") || strings.HasPrefix(dep, module+"internal/controller") {
				t.Errorf("%s depends on %s", strings.TrimPrefix(fields[0], module), strings.TrimPrefix(dep, module))
			}
		}
	}
}
