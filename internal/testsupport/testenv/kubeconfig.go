package testenv

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
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
	if err := kubeclient.WritePrivateFile(path, kubeconfig); err != nil {
		return "", err
	}
	return path, nil
}
