package testenv

import (
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// Shell is a command line as the README writes it, run by bash with pipefail from the repository root, with
// kubeconfig as KUBECONFIG and the folders of path, then the envtest binaries (kubectl), first on PATH.
func Shell(command, kubeconfig string, path ...string) *exec.Cmd {
	cmd := exec.Command("bash", "-o", "pipefail", "-c", command)
	cmd.Dir = repo.Root()
	dirs := append(slices.Clone(path), os.Getenv("KUBEBUILDER_ASSETS"), os.Getenv("PATH"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+strings.Join(dirs, string(os.PathListSeparator)))
	return cmd
}
