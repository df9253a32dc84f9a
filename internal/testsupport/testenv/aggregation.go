package testenv

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
)

// frontProxyClient is the name the kube-apiserver's front-proxy client certificate carries, and the only name
// aggregated servers accept X-Remote-* headers from.
const frontProxyClient = "front-proxy-client"

// FrontProxy sets the flags an aggregated API server needs on env's kube-apiserver, before env.Start: a front-proxy CA
// of its own (written to dir), the client certificate the kube-apiserver presents to aggregated servers, and the
// X-Remote-* header names. The aggregated server reads them from extension-apiserver-authentication, as on a real hub.
func FrontProxy(env *envtest.Environment, dir string) error {
	now := time.Now()
	ca, err := certs.NewCA("front-proxy-ca", 24*time.Hour, now)
	if err != nil {
		return err
	}
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: frontProxyClient, Usages: []certs.Usage{certs.UsageClientAuth},
		Duration: 24 * time.Hour}, now)
	if err != nil {
		return err
	}
	files := map[string][]byte{"front-proxy-ca.crt": ca.CertPEM, "front-proxy-client.crt": leaf.CertPEM, "front-proxy-client.key": leaf.KeyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	api := env.ControlPlane.GetAPIServer().Configure()
	api.Set("requestheader-client-ca-file", filepath.Join(dir, "front-proxy-ca.crt"))
	api.Set("requestheader-allowed-names", frontProxyClient)
	api.Set("requestheader-username-headers", "X-Remote-User")
	api.Set("requestheader-group-headers", "X-Remote-Group")
	api.Set("requestheader-extra-headers-prefix", "X-Remote-Extra-")
	api.Set("proxy-client-cert-file", filepath.Join(dir, "front-proxy-client.crt"))
	api.Set("proxy-client-key-file", filepath.Join(dir, "front-proxy-client.key"))
	return nil
}

// RegisterAPIService registers group/version as the operator does, with an APIService whose Service (an
// ExternalName to localhost, created in namespace with the namespace when missing) leads to port on this machine and
// whose caBundle is caPEM, then waits until cfg's kube-apiserver serves the group version.
func RegisterAPIService(ctx context.Context, c client.Client, cfg *rest.Config, namespace, group, version string, port int, caPEM []byte) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "gateway"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}}
	if err := c.Create(ctx, svc); err != nil {
		return err
	}
	apiService := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": version + "." + group},
		"spec": map[string]any{"group": group, "version": version, "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service":  map[string]any{"namespace": namespace, "name": svc.Name, "port": int64(port)},
			"caBundle": base64.StdEncoding.EncodeToString(caPEM)},
	}}
	if err := c.Create(ctx, apiService); err != nil {
		return err
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	last := errors.New("not asked yet")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, last = admin.Discovery().ServerResourcesForGroupVersion(group + "/" + version)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("the kube-apiserver does not serve %s/%s within a minute: %w", group, version, last)
	}
	return nil
}
