// Package kubeclient is what the local system and the tests do as a client of a cluster: render and write
// kubeconfigs (with a forward proxy's URL and CA), run kubectl, request a ServiceAccount token, create objects.
package kubeclient

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/proxyenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/process"
)

// Kubectl runs kubectl from KUBEBUILDER_ASSETS with a kubeconfig and a 15 s request timeout; it returns stdout, or
// an error that quotes stderr.
func Kubectl(kubeconfig string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl"),
		append([]string{"--kubeconfig", kubeconfig, "--request-timeout=15s"}, args...)...)
	return process.Output(cmd, "kubectl "+strings.Join(args, " "))
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

// CreateAll creates objs in order, tolerating ones that already exist.
func CreateAll(ctx context.Context, c client.Client, objs ...client.Object) error {
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

// Kubeconfig renders cfg (a client certificate, or a bearer token) as a kubeconfig whose cluster, user and context are all
// called name. proxyURL, when set, is the cluster's proxy-url; proxyCA, when set, follows the server's CA in
// certificate-authority-data, which is how a client trusts an HTTPS proxy too.
func Kubeconfig(name string, cfg *rest.Config, proxyURL string, proxyCA []byte) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	caData := cfg.CAData
	if len(proxyCA) > 0 {
		caData = proxyenv.TrustBundle(cfg.CAData, proxyenv.Settings{HTTPSProxy: proxyURL, CABundle: proxyCA})
	}
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: caData, ProxyURL: proxyURL}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
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
	return WritePrivateFile(path, data)
}

// WritePrivateFile writes a file holding a private key: readable by its owner only, its folder created. Chmod also
// covers a file left by an earlier run in a reused folder, whose mode WriteFile keeps.
func WritePrivateFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}
