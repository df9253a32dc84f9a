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
	for _, pkg := range []string{"cmd/proxy-agent", "cmd/proxy-server", "pkg/clusterproxy", "cmd/kubectl-cluster_proxy"} {
		out, err := exec.Command("go", "list", "-deps", module+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, module+"internal/hub/") || strings.HasPrefix(dep, module+"internal/controller") {
				t.Errorf("%s depends on %s", pkg, strings.TrimPrefix(dep, module))
			}
		}
	}
}
