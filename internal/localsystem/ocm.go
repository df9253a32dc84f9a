package localsystem

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	appsv1 "k8s.io/api/apps/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/controllers"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/proxyenv"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

const (
	ocmHubNamespace   = "open-cluster-management-hub"
	ocmAgentNamespace = "open-cluster-management-agent"
	// bootstrapGroup is the group OCM's cluster-manager chart binds its bootstrap ClusterRole to.
	bootstrapGroup       = "system:bootstrappers:managedcluster"
	bootstrapClusterRole = "open-cluster-management:bootstrap"
	// clusterNameLabel marks a managed cluster's CSRs; addonNameLabel an add-on's, which accepting must not approve.
	clusterNameLabel = "open-cluster-management.io/cluster-name"
	addonNameLabel   = "open-cluster-management.io/addon-name"
)

// bootstrapUser is cluster's bootstrap identity: a client certificate of the hub's CA in the bootstrap group, with
// the rights of a bootstrap token.
func bootstrapUser(cluster string) string {
	return "system:open-cluster-management:bootstrap:" + cluster
}

// ocmImage packs bin/ocm-local, non-root.
func (s *System) ocmImage() (string, error) {
	f, err := ociimage.Copy("ocm-local", 0o755, s.opts.OCMLocal)
	if err != nil {
		return "", fmt.Errorf("ocm-local (make ocm-local): %w", err)
	}
	img, err := ociimage.Build(realcluster.Platform, v1.Config{User: "65532:65532", Entrypoint: []string{"/ocm-local"}},
		ociimage.Step{Files: []ociimage.File{f}, CreatedBy: "localsystem: bin/ocm-local"})
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(s.path("images"), 0o755); err != nil {
		return "", err
	}
	path := s.path("images", "ocm-local.tar")
	return path, ociimage.WriteArchive(path, ocmImage, img)
}

// deployOCMHub installs OCM's hub CRDs and runs its hub controllers (registration, add-on manager, work) as a pod, as
// OCM's cluster-manager does, with the bootstrap RBAC its chart creates.
func (s *System) deployOCMHub(ctx context.Context) error {
	crds, err := testenv.OCMHubCRDFiles()
	if err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(s.Hub.Config, envtest.CRDInstallOptions{Paths: crds, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("install OCM's hub CRDs: %w", err)
	}
	objs := append(adminPodRBAC(ocmHubNamespace, "ocm-hub"),
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: bootstrapClusterRole},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
				{APIGroups: []string{"certificates.k8s.io"}, Resources: []string{"certificatesigningrequests"}, Verbs: []string{"create", "get", "list", "watch"}},
				{APIGroups: []string{"cluster.open-cluster-management.io"}, Resources: []string{"managedclusters"}, Verbs: []string{"get", "create", "list", "watch"}},
				{APIGroups: []string{"cluster.open-cluster-management.io"}, Resources: []string{"managedclustersets/join"}, Verbs: []string{"create"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: bootstrapClusterRole + ":managedcluster"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: bootstrapClusterRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: bootstrapGroup}},
		},
		ocmDeployment(ocmHubNamespace, "ocm-hub", []string{"hub", "--hub-apiserver-url=" + s.Hub.APIServer()}, nil, nil),
	)
	return createAll(ctx, s.HubClient, objs)
}

// joinCluster installs the klusterlet's CRDs on c, runs the klusterlet agent there as a pod with a bootstrap
// kubeconfig for the hub (through squid for cluster1), and accepts the cluster as 'clusteradm accept' does.
func (s *System) joinCluster(ctx context.Context, c *realcluster.Cluster) error {
	crdDir := s.path("klusterlet-crds")
	if out, err := exec.CommandContext(ctx, s.opts.OCMLocal, "crds", "managed", crdDir).CombinedOutput(); err != nil {
		return fmt.Errorf("ocm-local crds managed: %w: %s", err, out)
	}
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{Paths: []string{crdDir}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("install the klusterlet's CRDs on %s: %w", c.Name(), err)
	}
	bootstrap, err := s.bootstrapKubeconfig(c)
	if err != nil {
		return err
	}
	managed, err := client.New(c.Config, client.Options{Scheme: controllers.NewScheme()})
	if err != nil {
		return err
	}
	volumes := []corev1.Volume{
		{Name: "bootstrap", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "bootstrap-hub-kubeconfig"}}},
		{Name: "hub-kubeconfig", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	mounts := []corev1.VolumeMount{
		{Name: "bootstrap", MountPath: "/spoke/bootstrap", ReadOnly: true},
		{Name: "hub-kubeconfig", MountPath: "/spoke/hub-kubeconfig"},
	}
	objs := append(adminPodRBAC(ocmAgentNamespace, "klusterlet"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "open-cluster-management-agent-addon"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-hub-kubeconfig", Namespace: ocmAgentNamespace},
			Data: map[string][]byte{"kubeconfig": bootstrap}},
		ocmDeployment(ocmAgentNamespace, "klusterlet", []string{"agent", "--cluster-name=" + c.Name(),
			"--bootstrap-kubeconfig=/spoke/bootstrap/kubeconfig", "--hub-kubeconfig-dir=/spoke/hub-kubeconfig",
			"--status-sync-interval=3s"}, volumes, mounts),
	)
	if err := createAll(ctx, managed, objs); err != nil {
		return err
	}
	return s.accept(ctx, c.Name())
}

// bootstrapKubeconfig is c's klusterlet's way to the hub: through squid over TLS (proxy-url, squid's CA after the
// hub's) for cluster1, through the forwarder on its side of the machine for 1st-cluster.
func (s *System) bootstrapKubeconfig(c *realcluster.Cluster) ([]byte, error) {
	id, err := s.Hub.IssueClient(bootstrapUser(c.Name()), bootstrapGroup)
	if err != nil {
		return nil, err
	}
	cluster := &clientcmdapi.Cluster{Server: s.Hub.APIServer(), CertificateAuthorityData: s.Hub.CA()}
	if c.Name() == ProxiedCluster {
		cluster.ProxyURL = s.Squid.TLSURL()
		cluster.CertificateAuthorityData = proxyenv.TrustBundle(s.Hub.CA(), proxyenv.Settings{HTTPSProxy: s.Squid.TLSURL(), CABundle: s.Squid.CA()})
	} else {
		cluster.Server = fmt.Sprintf("https://%s:%d", c.HostIP, realcluster.APIServerPort)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["hub"] = cluster
	kc.AuthInfos["bootstrap"] = &clientcmdapi.AuthInfo{ClientCertificateData: id.CertPEM, ClientKeyData: id.KeyPEM}
	kc.Contexts["bootstrap"] = &clientcmdapi.Context{Cluster: "hub", AuthInfo: "bootstrap"}
	kc.CurrentContext = "bootstrap"
	return clientcmd.Write(*kc)
}

// accept sets hubAcceptsClient on cluster's ManagedCluster and approves the registration CSRs its bootstrap identity
// made (the hub's kube-controller-manager signs them), then waits until the cluster is Available.
func (s *System) accept(ctx context.Context, cluster string) error {
	var mc clusterv1.ManagedCluster
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := s.HubClient.Get(ctx, client.ObjectKey{Name: cluster}, &mc); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		if !mc.Spec.HubAcceptsClient {
			patch := client.MergeFrom(mc.DeepCopy())
			mc.Spec.HubAcceptsClient = true
			if err := s.HubClient.Patch(ctx, &mc, patch); err != nil {
				return false, err
			}
		}
		var csrs certificatesv1.CertificateSigningRequestList
		if err := s.HubClient.List(ctx, &csrs, client.MatchingLabels{clusterNameLabel: cluster}); err != nil {
			return false, err
		}
		for i := range csrs.Items {
			csr := &csrs.Items[i]
			if _, addon := csr.Labels[addonNameLabel]; addon || csr.Spec.Username != bootstrapUser(cluster) || decided(csr) {
				continue
			}
			csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
				Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "AcceptedByLocalSystem",
				Message: "cluster " + cluster + " accepted", LastUpdateTime: metav1.Now(),
			})
			if err := s.HubClient.SubResource("approval").Update(ctx, csr); err != nil {
				return false, err
			}
		}
		return meta.IsStatusConditionTrue(mc.Status.Conditions, clusterv1.ManagedClusterConditionAvailable), nil
	})
	if err != nil {
		return fmt.Errorf("join %s (its klusterlet's log: kubectl -n %s logs deploy/klusterlet): %w", cluster, ocmAgentNamespace, err)
	}
	return nil
}

func decided(csr *certificatesv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved || c.Type == certificatesv1.CertificateDenied {
			return true
		}
	}
	return false
}

// adminPodRBAC is a namespace and a ServiceAccount bound to cluster-admin, as OCM's operators give its components.
func adminPodRBAC(namespace, name string) []client.Object {
	return []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "local:" + name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
		},
	}
}

// ocmDeployment runs ocm-local with args as name's ServiceAccount, non-root and locked down.
func ocmDeployment(namespace, name string, args []string, volumes []corev1.Volume, mounts []corev1.VolumeMount) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ServiceAccountName: name,
			SecurityContext:    &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: name, Image: ocmImage, ImagePullPolicy: corev1.PullNever, Args: args, VolumeMounts: mounts,
				SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
			Volumes: volumes,
		}},
	}}
}

// createAll creates objs in order, tolerating ones that exist.
func createAll(ctx context.Context, c client.Client, objs []client.Object) error {
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}
