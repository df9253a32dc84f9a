package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AdminKubeconfig adds user to env as a cluster admin (group system:masters) and writes a kubeconfig of that user
// to path, creating its folder; it returns path.
func AdminKubeconfig(env *envtest.Environment, user, path string) (string, error) {
	u, err := env.AddUser(envtest.User{Name: user, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", user, err)
	}
	kubeconfig, err := u.KubeConfig()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return "", err
	}
	// WriteFile keeps the mode of a file left by an earlier run in a reused folder; it holds a private key.
	if err := os.Chmod(path, 0o600); err != nil {
		return "", err
	}
	return path, nil
}
