package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/repo"
)

// managerTokenTTL outlives any run, as the token a deployed manager reads from its projected volume effectively does:
// the kubelet renews that one, and nothing would renew this one.
const managerTokenTTL = 365 * 24 * time.Hour

// managerRBACFiles are the files of config/rbac that make the manager's identity when it is deployed.
var managerRBACFiles = []string{"service_account.yaml", "role.yaml", "role_binding.yaml", "leader_election_role.yaml"}

// DeployedManagerKubeconfig creates namespace when missing and the ServiceAccount and RBAC of config/rbac in it (the
// bindings' subjects too), and writes to path a kubeconfig of that ServiceAccount with a token for the whole run. cfg
// is an admin config of the API server, c an admin client. Running the manager with it proves that the shipped
// least-privilege rules suffice: its requests go through RBAC and API Priority and Fairness queues, which a cluster
// admin's skip.
func DeployedManagerKubeconfig(ctx context.Context, cfg *rest.Config, c client.Client, namespace, path string) error {
	sa, err := createManagerRBAC(ctx, c, namespace)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	token, err := kubeclient.ServiceAccountToken(ctx, cs, namespace, sa, managerTokenTTL)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["manager"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "manager", Namespace: namespace}
	kc.CurrentContext = "hub"
	return clientcmd.WriteToFile(*kc, path)
}

// createManagerRBAC creates namespace when missing and the objects of managerRBACFiles with their namespace and their
// subjects' namespace set to it; it returns the ServiceAccount's name.
func createManagerRBAC(ctx context.Context, c client.Client, namespace string) (string, error) {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	var sa string
	for _, file := range managerRBACFiles {
		raw, err := os.ReadFile(filepath.Join(repo.Root(), "config", "rbac", file))
		if err != nil {
			return "", err
		}
		objs, err := DecodeObjects(bytes.NewReader(raw))
		if err != nil {
			return "", fmt.Errorf("config/rbac/%s: %w", file, err)
		}
		for _, obj := range objs {
			if obj.GetNamespace() != "" {
				obj.SetNamespace(namespace)
			}
			if obj.GetKind() == "ServiceAccount" {
				sa = obj.GetName()
			}
			subjects, _, _ := unstructured.NestedSlice(obj.Object, "subjects")
			for _, s := range subjects {
				s.(map[string]any)["namespace"] = namespace
			}
			if subjects != nil {
				if err := unstructured.SetNestedSlice(obj.Object, subjects, "subjects"); err != nil {
					return "", err
				}
			}
			if err := c.Create(ctx, obj); err != nil {
				return "", fmt.Errorf("create %s %s from config/rbac/%s: %w", obj.GetKind(), obj.GetName(), file, err)
			}
		}
	}
	if sa == "" {
		return "", fmt.Errorf("no ServiceAccount in config/rbac/%s", managerRBACFiles[0])
	}
	return sa, nil
}
