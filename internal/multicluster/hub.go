package multicluster

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ocmjoin"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// startHub starts the hub control plane with a client CA whose key is on disk, and writes its admin kubeconfig.
func (e *Env) startHub(context.Context) error {
	crds, err := hubCRDPaths()
	if err != nil {
		return err
	}
	authn, err := newClientCAAuthn(e.path("hub", "client-ca"))
	if err != nil {
		return err
	}
	e.HubClientCA, e.HubClientCAKey = authn.certFile, authn.keyFile
	env, stop, err := controlPlane{name: "hub", dir: e.path("hub"), logs: e.path("logs"), crds: crds, authn: authn}.start()
	e.stopHub = stop
	if err != nil {
		return err
	}
	e.HubEnv = env
	e.HubKubeconfig = e.path("hub.kubeconfig")
	if e.Hub, err = addUser(env, "hub", envtest.User{Name: "admin", Groups: []string{adminGroup}}, e.HubKubeconfig, "", nil); err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := clusterv1.Install(scheme); err != nil {
		return err
	}
	if e.hubClient, err = client.New(e.Hub, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("hub client: %w", err)
	}
	e.logf("    kube-apiserver %s, %d CRDs; admin kubeconfig %s", e.Hub.Host, len(env.CRDs), e.HubKubeconfig)
	return nil
}

// startHubProcesses grants the bootstrap group its role, then starts kube-controller-manager, which signs the
// klusterlets' CSRs with the hub's client CA, and the OCM hub components.
func (e *Env) startHubProcesses(ctx context.Context) error {
	if err := testenv.CreateAll(ctx, e.hubClient, ocmjoin.BootstrapRBAC()...); err != nil {
		return err
	}
	kcmKubeconfig := e.path("hub", "kube-controller-manager.kubeconfig")
	kcmUser := envtest.User{Name: "system:kube-controller-manager", Groups: []string{adminGroup}}
	if _, err := addUser(e.HubEnv, "hub", kcmUser, kcmKubeconfig, "", nil); err != nil {
		return err
	}
	bin, args := testenv.KubeControllerManager("csrsigning", "garbagecollector")
	kcm, err := e.startProcess("kube-controller-manager", bin, append(args, "--kubeconfig="+kcmKubeconfig,
		"--cluster-signing-cert-file="+e.HubClientCA, "--cluster-signing-key-file="+e.HubClientCAKey)...)
	if err != nil {
		return err
	}
	e.kcm = kcm

	ocmKubeconfig := e.path("hub", "ocm-hub.kubeconfig")
	ocmUser := envtest.User{Name: "system:open-cluster-management:hub", Groups: []string{adminGroup}}
	if _, err := addUser(e.HubEnv, "hub", ocmUser, ocmKubeconfig, "", nil); err != nil {
		return err
	}
	ocmHub, err := e.startProcess("ocm-hub", e.opts.OCMBinary, "hub", "--kubeconfig="+ocmKubeconfig, "--hub-apiserver-url="+e.Hub.Host)
	if err != nil {
		return err
	}
	e.ocmHub = ocmHub
	e.logf("    kube-controller-manager pid %d, ocm-local hub pid %d", kcm.Pid(), ocmHub.Pid())
	return nil
}
