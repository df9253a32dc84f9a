package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubectl runs kubectl from KUBEBUILDER_ASSETS with a kubeconfig and a 15 s request timeout; it returns stdout, or
// an error that quotes stderr.
func Kubectl(kubeconfig string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"),
		append([]string{"--kubeconfig", kubeconfig, "--request-timeout=15s"}, args...)...)
	return Output(cmd, "kubectl "+strings.Join(args, " "))
}

// Output runs cmd and returns its stdout, or an error that starts with what and quotes its stderr.
func Output(cmd *exec.Cmd, what string) (string, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s", what, err, stderr.String())
	}
	return string(out), nil
}

// ServiceAccountToken is a token of ServiceAccount ns/name from the TokenRequest API, valid for ttl, for audiences
// (none: the kube-apiserver's own).
func ServiceAccountToken(ctx context.Context, cs kubernetes.Interface, ns, name string, ttl time.Duration, audiences ...string) (string, error) {
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(int64(ttl.Seconds()))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// Shell is a command line as the README writes it, run by bash with pipefail from the repository root, with
// kubeconfig as KUBECONFIG and the folders of path, then the envtest binaries (kubectl), first on PATH.
func Shell(command, kubeconfig string, path ...string) *exec.Cmd {
	cmd := exec.Command("bash", "-o", "pipefail", "-c", command)
	cmd.Dir = RepoRoot()
	dirs := append(slices.Clone(path), os.Getenv("KUBEBUILDER_ASSETS"), os.Getenv("PATH"))
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+strings.Join(dirs, string(os.PathListSeparator)))
	return cmd
}

// CreateAll creates objs in order, tolerating ones that already exist.
func CreateAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}
