package localsystem

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	addonv1beta1 "open-cluster-management.io/api/addon/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/certs"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/ocmjoin"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/localsystem/realcluster"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/ociimage"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/scheme"
)

const (
	ocmHubNamespace   = "open-cluster-management-hub"
	ocmAgentNamespace = "open-cluster-management-agent"
	joinTimeout       = 3 * time.Minute
	webhookTimeout    = 2 * time.Minute
)

// ocmImage packs bin/ocm-local, non-root.
func (s *System) ocmImage() (string, error) {
	img, err := ociimage.Program(s.opts.OCMLocal, "ocm-local", "65532:65532")
	if err != nil {
		return "", fmt.Errorf("ocm-local (make ocm-local): %w", err)
	}
	if err := os.MkdirAll(s.path("images"), 0o755); err != nil {
		return "", err
	}
	path := s.path("images", "ocm-local.tar")
	return path, ociimage.WriteArchive(path, ocmImage, img)
}

// deployOCMHub installs OCM's hub CRDs as its cluster-manager renders them and runs its hub components as pods as
// that operator deploys them: the controllers (registration, placement, add-on manager, work) in one pod, and the
// add-on API's conversion webhook (v1alpha1, the stored version, and v1beta1) behind its Service, with the bootstrap
// RBAC OCM's chart creates. Its ClusterProfile feature is on: OCM keeps a ClusterProfile of each cluster in every
// namespace bound to a cluster set holding it, here ClusterProfileNamespace bound to the global set.
func (s *System) deployOCMHub(ctx context.Context) error {
	webhookCert, err := s.ocmWebhookCertificate()
	if err != nil {
		return err
	}
	crdDir := s.path("ocm-hub-crds")
	if out, err := exec.CommandContext(ctx, s.opts.OCMLocal, "crds", "hub", crdDir, "--namespace", ocmHubNamespace,
		"--ca-bundle-file", webhookCert.caFile).CombinedOutput(); err != nil {
		return fmt.Errorf("ocm-local crds hub: %w: %s", err, out)
	}
	if _, err := envtest.InstallCRDs(s.Hub.Config, envtest.CRDInstallOptions{Paths: []string{crdDir}, ErrorIfPathMissing: true}); err != nil {
		return fmt.Errorf("install OCM's hub CRDs: %w", err)
	}
	objs := append(adminPodRBAC(ocmHubNamespace, "ocm-hub"), ocmjoin.BootstrapRBAC()...)
	objs = append(objs, ocmWebhook(webhookCert)...)
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ClusterProfileNamespace}}, globalSetBinding(ClusterProfileNamespace),
		ocmDeployment(ocmHubNamespace, "ocm-hub", []string{"hub", "--hub-apiserver-url=" + s.Hub.APIServer(),
			"--feature-gates=ClusterProfile=true"}, nil, nil))
	return kubeclient.CreateAll(ctx, s.HubClient, objs...)
}

// waitForAddOnWebhook waits until the hub converts add-ons through OCM's webhook: a dry-run create of a v1beta1
// ClusterManagementAddOn, which the API server converts to the stored v1alpha1 without storing it, succeeds. Until
// then every v1beta1 write fails, the operator's and a user's alike.
func (s *System) waitForAddOnWebhook(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, webhookTimeout)
	defer cancel()
	for {
		probe := &addonv1beta1.ClusterManagementAddOn{ObjectMeta: metav1.ObjectMeta{Name: "local-system-webhook-probe"},
			Spec: addonv1beta1.ClusterManagementAddOnSpec{InstallStrategy: addonv1beta1.InstallStrategy{Type: addonv1beta1.AddonInstallStrategyManual}}}
		err := s.HubClient.Create(ctx, probe, client.DryRunAll)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("OCM's add-on webhook does not convert add-ons (kubectl -n %s logs deploy/%s): %w", ocmHubNamespace, ocmWebhookName, err)
		case <-time.After(200 * time.Millisecond): // the API server tells no sooner than asked
		}
	}
}

// ClusterProfileNamespace is where OCM keeps the ClusterProfiles of the local system's clusters.
const ClusterProfileNamespace = "open-cluster-management"

// ocmWebhookName is the add-on webhook's Deployment and Service, as the cluster-manager operator names them.
const ocmWebhookName = "cluster-manager-addon-webhook"

type webhookCertificate struct {
	caFile    string
	cert, key []byte
}

// ocmWebhookCertificate issues the add-on webhook's serving certificate for its Service from a CA of its own, as the
// cluster-manager operator does, and writes the CA where 'ocm-local crds hub' reads it.
func (s *System) ocmWebhookCertificate() (webhookCertificate, error) {
	now := time.Now()
	ca, err := certs.NewCA("ocm-addon-webhook-ca", 10*365*24*time.Hour, now)
	if err != nil {
		return webhookCertificate{}, err
	}
	leaf, err := certs.IssueLeaf(ca, certs.LeafSpec{CommonName: ocmWebhookName,
		DNSNames: []string{ocmWebhookName + "." + ocmHubNamespace + ".svc"}, Usages: []certs.Usage{certs.UsageServerAuth},
		Duration: 10 * 365 * 24 * time.Hour}, now)
	if err != nil {
		return webhookCertificate{}, err
	}
	caFile := s.path("ocm-addon-webhook-ca.crt")
	return webhookCertificate{caFile: caFile, cert: leaf.CertPEM, key: leaf.KeyPEM}, os.WriteFile(caFile, ca.CertPEM, 0o600)
}

// ocmWebhook is the add-on conversion webhook as the cluster-manager operator deploys it: a ServiceAccount with no
// rights, the serving certificate's Secret mounted where the webhook server looks, the Deployment and its Service.
func ocmWebhook(cert webhookCertificate) []client.Object {
	deployment := ocmDeployment(ocmHubNamespace, ocmWebhookName, []string{"webhook", "--port=9443"},
		[]corev1.Volume{{Name: "webhook-secret", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "addon-webhook-serving-cert"}}}},
		[]corev1.VolumeMount{{Name: "webhook-secret", MountPath: "/tmp/k8s-webhook-server/serving-certs", ReadOnly: true}})
	deployment.Spec.Template.Spec.ServiceAccountName = "addon-webhook-sa"
	deployment.Spec.Template.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
		HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromInt32(8000)}}}
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "addon-webhook-sa", Namespace: ocmHubNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "addon-webhook-serving-cert", Namespace: ocmHubNamespace},
			Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: cert.cert, corev1.TLSPrivateKeyKey: cert.key}},
		deployment,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: ocmWebhookName, Namespace: ocmHubNamespace}, Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": ocmWebhookName},
			Ports:    []corev1.ServicePort{{Name: "webhook", Port: 9443, TargetPort: intstr.FromInt32(9443)}},
		}},
	}
}

// globalSetBinding binds namespace to OCM's global cluster set (every cluster), as 'clusteradm clusterset bind'
// does; the binding's name is the set's, as OCM requires.
func globalSetBinding(namespace string) client.Object {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
		"metadata": map[string]any{"name": "global", "namespace": namespace},
		"spec":     map[string]any{"clusterSet": "global"},
	}}
}

// joinCluster installs the klusterlet's CRDs on c, runs the klusterlet agent there as a pod with a bootstrap
// kubeconfig for the hub (through squid for cluster1), and accepts the cluster as 'clusteradm accept' does. Several
// clusters may join at once.
func (s *System) joinCluster(ctx context.Context, c *realcluster.Cluster) error {
	crdDir := s.path("klusterlet-crds", c.Name()) // one folder per cluster: the clusters join side by side
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
	managed, err := client.New(c.Config, client.Options{Scheme: scheme.New()})
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
	if err := kubeclient.CreateAll(ctx, managed, objs...); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	if err := ocmjoin.Accept(ctx, s.HubClient, c.Name(), nil, nil); err != nil {
		return fmt.Errorf("%w (the klusterlet's log: kubectl -n %s logs deploy/klusterlet)", err, ocmAgentNamespace)
	}
	return nil
}

// bootstrapKubeconfig is c's klusterlet's way to the hub: through squid over TLS (proxy-url, squid's CA after the
// hub's) for cluster1, through the forwarder on its side of the machine for 1st-cluster.
func (s *System) bootstrapKubeconfig(c *realcluster.Cluster) ([]byte, error) {
	id, err := s.Hub.IssueClient(ocmjoin.BootstrapUser(c.Name()), ocmjoin.BootstrapGroup)
	if err != nil {
		return nil, err
	}
	cfg := &rest.Config{Host: s.Hub.APIServer(), TLSClientConfig: rest.TLSClientConfig{CAData: s.Hub.CA(), CertData: id.CertPEM, KeyData: id.KeyPEM}}
	if c.Name() == ProxiedCluster {
		return kubeclient.Kubeconfig("hub", cfg, s.Squid.TLSURL(), s.Squid.CA())
	}
	cfg.Host = fmt.Sprintf("https://%s:%d", c.HostIP, realcluster.APIServerPort)
	return kubeclient.Kubeconfig("hub", cfg, "", nil)
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
