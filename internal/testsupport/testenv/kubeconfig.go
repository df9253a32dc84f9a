package testenv

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
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
	if err := writePrivate(path, kubeconfig); err != nil {
		return "", err
	}
	return path, nil
}

// Kubeconfig renders cfg (client certificate authentication) as a kubeconfig whose cluster, user and context are all
// called name. proxyURL, when set, is the cluster's proxy-url; proxyCA, when set, follows the server's CA in
// certificate-authority-data, which is how a client trusts an HTTPS proxy too.
func Kubeconfig(name string, cfg *rest.Config, proxyURL string, proxyCA []byte) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	caData := cfg.CAData
	if len(proxyCA) > 0 {
		caData = proxyenv.TrustBundle(cfg.CAData, proxyenv.Settings{HTTPSProxy: proxyURL, CABundle: proxyCA})
	}
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: caData, ProxyURL: proxyURL}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	kc.CurrentContext = name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("render kubeconfig %s: %w", name, err)
	}
	return data, nil
}

// WriteKubeconfig writes Kubeconfig(name, cfg, proxyURL, proxyCA) to path, creating its folder.
func WriteKubeconfig(path, name string, cfg *rest.Config, proxyURL string, proxyCA []byte) error {
	data, err := Kubeconfig(name, cfg, proxyURL, proxyCA)
	if err != nil {
		return err
	}
	return writePrivate(path, data)
}

// writePrivate writes a file holding a private key: readable by its owner only, its folder created. Chmod also
// covers a file left by an earlier run in a reused folder, whose mode WriteFile keeps.
func writePrivate(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}
