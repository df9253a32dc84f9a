package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The manager's tokens live an hour and are renewed every 20 minutes, so the file always holds one with 40 minutes
// left and a failed renewal is tried twice more before the token in use expires.
const (
	managerTokenTTL     = time.Hour
	managerTokenRenewal = 20 * time.Minute
)

// managerRBACFiles are the files of config/rbac that make the manager's identity when it is deployed.
var managerRBACFiles = []string{"service_account.yaml", "role.yaml", "role_binding.yaml", "leader_election_role.yaml"}

// DeployedManager is the identity the manager runs with when deployed: its ServiceAccount, bound to the ClusterRole
// and the leader-election Role of config/rbac, authenticated with a token that is kept fresh in a file.
type DeployedManager struct {
	// Kubeconfig is the path of a kubeconfig that authenticates with TokenFile, which client-go re-reads, so a
	// renewed token is used without a restart.
	Kubeconfig string
	TokenFile  string

	cancel context.CancelFunc
	done   chan struct{}
}

// DeployedManagerKubeconfig creates namespace when missing and the ServiceAccount and RBAC of config/rbac in it (the
// bindings' subjects too), writes a kubeconfig of that ServiceAccount to path and its token beside it, and renews the
// token until Stop. cfg is an admin config of the API server, c an admin client; renewal failures go to log (nil
// discards them). Running the manager with it proves that the shipped least-privilege rules suffice: its requests go
// through RBAC and API Priority and Fairness queues, which a cluster admin's skip.
func DeployedManagerKubeconfig(ctx context.Context, cfg *rest.Config, c client.Client, namespace, path string, log io.Writer) (*DeployedManager, error) {
	if log == nil {
		log = io.Discard
	}
	sa, err := createManagerRBAC(ctx, c, namespace)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	m := &DeployedManager{Kubeconfig: path, TokenFile: path + ".token", done: make(chan struct{})}
	renew := func(ctx context.Context) error {
		token, err := ServiceAccountToken(ctx, cs, namespace, sa, managerTokenTTL)
		if err != nil {
			return err
		}
		return writeFileAtomic(m.TokenFile, []byte(token))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := renew(ctx); err != nil {
		return nil, err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthority: cfg.CAFile, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["manager"] = &clientcmdapi.AuthInfo{TokenFile: m.TokenFile}
	kc.Contexts["hub"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "manager", Namespace: namespace}
	kc.CurrentContext = "hub"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return nil, err
	}
	// The token outlives the caller's start-up deadline: Stop ends the renewal.
	var renewCtx context.Context
	renewCtx, m.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(m.done)
		tick := time.NewTicker(managerTokenRenewal)
		defer tick.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-tick.C:
				if err := renew(renewCtx); err != nil && renewCtx.Err() == nil {
					fmt.Fprintf(log, "renew the manager's token: %v\n", err)
				}
			}
		}
	}()
	return m, nil
}

// Stop ends the token renewal; the files stay.
func (m *DeployedManager) Stop() {
	m.cancel()
	<-m.done
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
		raw, err := os.ReadFile(filepath.Join(RepoRoot(), "config", "rbac", file))
		if err != nil {
			return "", err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return "", fmt.Errorf("config/rbac/%s: %w", file, err)
			}
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

// writeFileAtomic replaces path by a file with data, through a rename, so a reader never sees it half written.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // fails harmlessly once renamed
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
